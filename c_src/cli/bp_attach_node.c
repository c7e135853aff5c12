/* bp_attach_node.c -- `beamprobe attach' as a hidden C node: the
 * distribution side of cmd_attach.c.
 *
 * Connecting (cookie, short or long names), rpc calls through
 * erl_interface's ei, the version check against the NIF's build info,
 * loading src/beamprobe_attach.erl's module and spawning its agent,
 * placing the NIF where the node can load it and loading the application
 * and its modules, the agent's requests, and the messages of the session
 * (stop, done, --cluster's clock offsets).  The command itself (options, flow, stream, printer):
 * cmd_attach.c.
 */
#define _GNU_SOURCE
#include "bp_attach_node.h"
#include "bp_cli.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ei.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- files ----------------------------------------------------------- */

static int read_file(const char *path, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	long n;
	char *b;

	if (!f)
		return -1;
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0 || !(b = malloc((size_t)n + 1))) {
		fclose(f);
		return -1;
	}
	if (fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		fclose(f);
		return -1;
	}
	fclose(f);
	b[n] = '\0';
	*out = b;
	*len = (size_t)n;
	return 0;
}

static int write_file(const char *path, const void *p, size_t n, int mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		      mode);
	ssize_t w;

	if (fd < 0)
		return -1;
	w = write(fd, p, n);
	if (close(fd) != 0 || w != (ssize_t)n)
		return -1;
	return 0;
}

/* Removes dir and the files in it (one level: what we created). */
void bp_attach_remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[PATH_MAX + 300];

	if (!d)
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
			unlink(p);
		}
	closedir(d);
	rmdir(dir);
}

const char *bp_attach_tmp_base(void)
{
	const char *t = getenv("TMPDIR");
	return t && *t ? t : "/tmp";
}

/* ---- ei helpers ------------------------------------------------------ */

/* Decodes a string, binary, atom or [] at *idx into out. */
static int get_text(const char *buf, int *idx, char *out, size_t n)
{
	int type, size;
	long len;

	if (ei_get_type(buf, idx, &type, &size) < 0)
		return -1;
	out[0] = '\0';
	switch (type) {
	case ERL_STRING_EXT:
	case ERL_BINARY_EXT: {
		/* A text longer than out is cut, and says so. */
		char *t = (size_t)size < n ? out : malloc((size_t)size + 1);
		int rc;
		if (!t)
			return -1;
		if (type == ERL_STRING_EXT) {
			rc = ei_decode_string(buf, idx, t);
			len = size;
		} else {
			rc = ei_decode_binary(buf, idx, t, &len);
		}
		if (rc == 0)
			t[len] = '\0';
		if (t != out) {
			if (rc == 0 && n > 4)
				snprintf(out, n, "%.*s...", (int)(n - 4), t);
			free(t);
		}
		return rc < 0 ? -1 : 0;
	}
	case ERL_NIL_EXT:
		return ei_decode_list_header(buf, idx, &size);
	case ERL_ATOM_EXT:
	case ERL_SMALL_ATOM_EXT:
	case ERL_ATOM_UTF8_EXT:
	case ERL_SMALL_ATOM_UTF8_EXT:
		if ((size_t)size >= n)
			return -1;
		return ei_decode_atom(buf, idx, out);
	default:
		return -1;
	}
}

/* Calls mod:fun(args) on the node; the reply is in res (index 0).  -1 if
 * the connection failed. */
static int rpc(struct bp_attach *a, const char *mod, const char *fun,
	       ei_x_buff *args, ei_x_buff *res)
{
	if (ei_rpc(&a->ec, a->fd, (char *)mod, (char *)fun, args->buff,
		   args->index, res) < 0) {
		bp_cli_error("lost the connection to %s (rpc %s:%s)", a->node,
			     mod, fun);
		return -1;
	}
	return 0;
}

/* A reply ok | {ok, Text} | {error, Text}: 0 (ok), -1 (error, text in
 * out), -2 (anything else, printed in out). */
static int reply(ei_x_buff *res, char *out, size_t n)
{
	int idx = 0, arity;
	char tag[MAXATOMLEN_UTF8];

	out[0] = '\0';
	if (ei_decode_atom(res->buff, &idx, tag) == 0)
		return strcmp(tag, "ok") == 0 ? 0 : -2;
	idx = 0;
	if (ei_decode_tuple_header(res->buff, &idx, &arity) == 0 &&
	    arity == 2 && ei_decode_atom(res->buff, &idx, tag) == 0 &&
	    get_text(res->buff, &idx, out, n) == 0) {
		if (!strcmp(tag, "ok"))
			return 0;
		if (!strcmp(tag, "error"))
			return -1;
	}
	idx = 0;
	char *s = NULL;
	if (ei_s_print_term(&s, res->buff, &idx) >= 0) {
		snprintf(out, n, "%s", s);
		free(s);
	}
	return -2;
}

/* The text of M:F(Atom) on the node ("?" when it has none); 0 when the
 * call was made. */
static int rpc_atom_text(struct bp_attach *a, const char *m, const char *f,
			 const char *atom, char *out, size_t n)
{
	ei_x_buff args, res;
	int idx = 0, rc;

	ei_x_new(&args);
	ei_x_new(&res);
	ei_x_encode_list_header(&args, 1);
	ei_x_encode_atom(&args, atom);
	ei_x_encode_empty_list(&args);
	rc = rpc(a, m, f, &args, &res);
	if (rc == 0 && get_text(res.buff, &idx, out, n) != 0)
		snprintf(out, n, "?");
	ei_x_free(&args);
	ei_x_free(&res);
	return rc;
}

/* Text of code:which(Mod) (a path, or non_existing, preloaded, ...). */
int bp_attach_which(struct bp_attach *a, const char *mod, char *out,
		    size_t n)
{
	return rpc_atom_text(a, "code", "which", mod, out, n);
}

/* erlang:module_loaded(Mod) on the node (0 when the call fails). */
int bp_attach_module_loaded(struct bp_attach *a, const char *mod)
{
	char out[16] = "";

	return rpc_atom_text(a, "erlang", "module_loaded", mod, out,
			     sizeof out) == 0 && !strcmp(out, "true");
}

static int system_info(struct bp_attach *a, const char *key, char *out,
		       size_t n)
{
	return rpc_atom_text(a, "erlang", "system_info", key, out, n);
}

/* beamprobe_attach:request(Agent, Req) where Req is built by fill().
 * 0 ok (text in out), -1 error (printed). */
int bp_attach_request(struct bp_attach *a,
		      void (*fill)(ei_x_buff *, const void *),
		   const void *arg, const char *what, char *out, size_t n)
{
	ei_x_buff args, res;
	int rc;

	ei_x_new(&args);
	ei_x_new(&res);
	ei_x_encode_list_header(&args, 2);
	ei_x_encode_pid(&args, &a->agent);
	fill(&args, arg);
	ei_x_encode_empty_list(&args);
	rc = rpc(a, "beamprobe_attach", "request", &args, &res);
	if (rc == 0) {
		rc = reply(&res, out, n);
		if (rc != 0 && what)
			bp_cli_error("%s: %s: %s", a->node, what, out);
		rc = rc ? -1 : 0;
	}
	ei_x_free(&args);
	ei_x_free(&res);
	return rc;
}

/* ---- connecting ------------------------------------------------------ */

int bp_attach_read_cookie(const char *opt, const char *file, char *out,
			  size_t n)
{
	char path[PATH_MAX], *b;
	size_t len;

	if (opt) {
		len = strlen(opt);
		if (len >= n || !len) {
			bp_cli_error("--cookie: %s", len ? "longer than 511 bytes"
							: "empty");
			return -1;
		}
		memcpy(out, opt, len + 1);
		/* Out of the command line others can read (ps, /proc): a
		 * cookie is the node's password.  Only from now on: the man
		 * page says to prefer --cookie-file. */
		memset((char *)opt, 'x', len);
		return 0;
	}
	if (!file) {
		const char *h = getenv("HOME");
		snprintf(path, sizeof path, "%s/.erlang.cookie", h ? h : "");
		file = path;
	}
	if (read_file(file, &b, &len) != 0) {
		bp_cli_error("cannot read the cookie from %s: %s (give "
			     "--cookie or --cookie-file)", file,
			     strerror(errno));
		return -1;
	}
	while (len && (b[len - 1] == '\n' || b[len - 1] == '\r' ||
		       b[len - 1] == ' '))
		b[--len] = '\0';
	if (len >= n) {
		bp_cli_error("the cookie in %s is longer than 511 bytes", file);
		free(b);
		return -1;
	}
	snprintf(out, n, "%s", b);
	free(b);
	if (!len)
		bp_cli_error("the cookie in %s is empty", file);
	return len ? 0 : -1;
}

int bp_attach_connect(struct bp_attach *a, const char *cookie, char *full,
		      size_t fulln)
{
	char alive[64], host[256];
	const char *at = strchr(full, '@');
	int longnames;

	if (!at) {
		/* "name": a short name on this host */
		char h[200];
		if (gethostname(h, sizeof h) != 0)
			return -1;
		h[sizeof h - 1] = '\0';
		char *dot = strchr(h, '.');
		if (dot)
			*dot = '\0';
		size_t l = strlen(full);
		snprintf(full + l, fulln - l, "@%s", h);
		at = strchr(full, '@');
		if (!at) {
			bp_cli_error("node name too long (%zu characters at most)",
				     fulln - 2 - strlen(h));
			return -1;
		}
	}
	longnames = strchr(at + 1, '.') != NULL;
	snprintf(alive, sizeof alive, "beamprobe_attach_%ld", (long)getpid());
	if (longnames) {
		char thisnode[400];
		struct in_addr ip;
		char fq[256];
		if (gethostname(fq, sizeof fq) != 0)
			return -1;
		fq[sizeof fq - 1] = '\0';
		snprintf(host, sizeof host, "%s", fq);
		if (!strchr(host, '.'))
			snprintf(host, sizeof host, "%s", "127.0.0.1");
		snprintf(thisnode, sizeof thisnode, "%s@%s", alive, host);
		inet_aton("127.0.0.1", &ip);
		if (ei_connect_xinit(&a->ec, host, alive, thisnode,
				     (Erl_IpAddr)&ip, cookie, 0) < 0) {
			bp_cli_error("ei_connect_xinit failed");
			return -1;
		}
	} else if (ei_connect_init(&a->ec, alive, cookie, 0) < 0) {
		bp_cli_error("ei_connect_init failed");
		return -1;
	}
	a->fd = ei_connect_tmo(&a->ec, full, 5000);
	if (a->fd < 0) {
		bp_cli_error("cannot connect to %s: is it running (epmd knows "
			     "it), with this cookie and %s names?",
			     full, longnames ? "long" : "short");
		return -1;
	}
	return 0;
}

/* Same host: the connection's two ends have the same address. */
void bp_attach_peer_info(struct bp_attach *a)
{
	struct sockaddr_storage l, p;
	socklen_t ll = sizeof l, pl = sizeof p;

	a->same_host = 0;
	snprintf(a->local_ip, sizeof a->local_ip, "127.0.0.1");
	if (getsockname(a->fd, (struct sockaddr *)&l, &ll) != 0 ||
	    getpeername(a->fd, (struct sockaddr *)&p, &pl) != 0)
		return;
	if (l.ss_family == AF_INET && p.ss_family == AF_INET) {
		struct in_addr li = ((struct sockaddr_in *)&l)->sin_addr;
		struct in_addr pi = ((struct sockaddr_in *)&p)->sin_addr;
		a->same_host = li.s_addr == pi.s_addr ||
			       (ntohl(pi.s_addr) >> 24) == 127;
		inet_ntop(AF_INET, &li, a->local_ip, sizeof a->local_ip);
	} else if (l.ss_family == AF_INET6 && p.ss_family == AF_INET6) {
		struct in6_addr li = ((struct sockaddr_in6 *)&l)->sin6_addr;
		struct in6_addr pi = ((struct sockaddr_in6 *)&p)->sin6_addr;
		a->same_host = !memcmp(&li, &pi, sizeof li) ||
			       IN6_IS_ADDR_LOOPBACK(&pi);
		inet_ntop(AF_INET6, &li, a->local_ip, sizeof a->local_ip);
	}
	/* BEAMPROBE_ATTACH_REMOTE: behave as for a node on another host
	 * (the stream to this end's address of the connection, remote =>
	 * true; the NIF over distribution): how the suite tests that path. */
	if (getenv("BEAMPROBE_ATTACH_REMOTE"))
		a->same_host = 0;
	if (a->same_host)
		snprintf(a->local_ip, sizeof a->local_ip, "127.0.0.1");
}

/* ---- bringing beamprobe ---------------------------------------------- */

/* value of key in the NIF's build info text ("key=value" lines). */
static int build_value(const char *text, const char *key, char *out,
		       size_t n)
{
	size_t kl = strlen(key);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (!strncmp(p, key, kl) && p[kl] == '=') {
			const char *v = p + kl + 1, *e = strchr(v, '\n');
			size_t l = e ? (size_t)(e - v) : strlen(v);
			if (l >= n)
				l = n - 1;
			memcpy(out, v, l);
			out[l] = '\0';
			return 0;
		}
	return -1;
}

/* The node must run the OTP release and architecture the NIF was built
 * for; checked before anything is loaded. */
int bp_attach_check_versions(struct bp_attach *a)
{
	char path[PATH_MAX + 32], *info, rel[64], arch[128], nrel[64],
		narch[128];
	const char *env = getenv("BEAMPROBE_NIF_BUILD");
	size_t len;

	snprintf(path, sizeof path, "%s/priv/beamprobe_nif.build", a->home);
	if (read_file(env ? env : path, &info, &len) != 0) {
		bp_cli_error("cannot read %s: %s (build beamprobe first)",
			     env ? env : path, strerror(errno));
		return -1;
	}
	if (build_value(info, "otp_release", rel, sizeof rel) ||
	    build_value(info, "system_architecture", arch, sizeof arch)) {
		free(info);
		bp_cli_error("%s: malformed", env ? env : path);
		return -1;
	}
	free(info);
	if (system_info(a, "otp_release", nrel, sizeof nrel) ||
	    system_info(a, "system_architecture", narch, sizeof narch))
		return -1;
	if (strcmp(rel, nrel) || strcmp(arch, narch)) {
		bp_cli_error("%s runs OTP %s on %s, but this beamprobe's NIF is "
			     "built for OTP %s on %s: nothing was loaded.  Use "
			     "a beamprobe built for that node, or put one on "
			     "its code path.", a->node, nrel, narch, rel, arch);
		return -1;
	}
	return 0;
}

static void fill_load(ei_x_buff *x, const void *arg)
{
	const char *const *mb = arg; /* {module, path} */
	char *bin;
	size_t len;

	ei_x_encode_tuple_header(x, 3);
	ei_x_encode_atom(x, "load");
	ei_x_encode_atom(x, mb[0]);
	if (read_file(mb[1], &bin, &len) == 0) {
		ei_x_encode_binary(x, bin, (long)len);
		free(bin);
	} else {
		ei_x_encode_atom(x, "unreadable");
	}
}

int bp_attach_load_self(struct bp_attach *a)
{
	char path[PATH_MAX + 64], *bin, out[512];
	size_t len;
	ei_x_buff args, res;
	int rc, idx = 0, arity;

	snprintf(path, sizeof path, "%s/ebin/beamprobe_attach.beam", a->home);
	if (read_file(path, &bin, &len) != 0) {
		bp_cli_error("cannot read %s: %s", path, strerror(errno));
		return -1;
	}
	ei_x_new(&args);
	ei_x_new(&res);
	ei_x_encode_list_header(&args, 3);
	ei_x_encode_atom(&args, "beamprobe_attach");
	ei_x_encode_string(&args, "beamprobe-attach:beamprobe_attach.beam");
	ei_x_encode_binary(&args, bin, (long)len);
	ei_x_encode_empty_list(&args);
	free(bin);
	rc = rpc(a, "code", "load_binary", &args, &res);
	if (rc == 0 && (ei_decode_tuple_header(res.buff, &idx, &arity) ||
			get_text(res.buff, &idx, out, sizeof out) ||
			strcmp(out, "module"))) {
		idx = 0;
		char *s = NULL;
		ei_s_print_term(&s, res.buff, &idx);
		bp_cli_error("%s: cannot load beamprobe_attach: %s", a->node,
			     s ? s : "?");
		free(s);
		rc = -1;
	}
	ei_x_free(&args);
	ei_x_free(&res);
	return rc;
}

int bp_attach_spawn_agent(struct bp_attach *a, int loaded_self)
{
	ei_x_buff args, res;
	int rc, idx = 0, arity;
	char tag[MAXATOMLEN_UTF8];

	ei_x_new(&args);
	ei_x_new(&res);
	ei_x_encode_list_header(&args, 2);
	ei_x_encode_pid(&args, ei_self(&a->ec));
	ei_x_encode_boolean(&args, loaded_self);
	ei_x_encode_empty_list(&args);
	rc = rpc(a, "beamprobe_attach", "spawn_agent", &args, &res);
	if (rc == 0 && (ei_decode_tuple_header(res.buff, &idx, &arity) ||
			ei_decode_atom(res.buff, &idx, tag) || strcmp(tag, "ok") ||
			ei_decode_pid(res.buff, &idx, &a->agent))) {
		char why[MAXATOMLEN_UTF8] = "";
		idx = 0;
		if (!ei_decode_tuple_header(res.buff, &idx, &arity) &&
		    arity == 2 && !ei_decode_atom(res.buff, &idx, tag) &&
		    !strcmp(tag, "error"))
			ei_decode_atom(res.buff, &idx, why);
		if (!strcmp(why, "busy"))
			bp_cli_error("%s: another beamprobe attach or profile "
				     "is active on this node", a->node);
		else
			bp_cli_error("%s: the attach agent did not start",
				     a->node);
		rc = -1;
	}
	a->have_agent = rc == 0;
	ei_x_free(&args);
	ei_x_free(&res);
	return rc;
}

struct nif_dir_arg {
	const char *dir, *nonce;
};

static void fill_nif_dir(ei_x_buff *x, const void *arg)
{
	const struct nif_dir_arg *d = arg;

	ei_x_encode_tuple_header(x, 3);
	ei_x_encode_atom(x, "nif_dir");
	ei_x_encode_string(x, d->dir);
	ei_x_encode_binary(x, d->nonce, (long)strlen(d->nonce));
}

static void fill_place_nif(ei_x_buff *x, const void *arg)
{
	const char *path = arg;
	char *bin;
	size_t len;

	ei_x_encode_tuple_header(x, 2);
	ei_x_encode_atom(x, "place_nif");
	if (read_file(path, &bin, &len) == 0) {
		ei_x_encode_binary(x, bin, (long)len);
		free(bin);
	} else {
		ei_x_encode_atom(x, "unreadable");
	}
}

struct app_arg {
	const char *app_text, *nif;
};

static void fill_load_app(ei_x_buff *x, const void *arg)
{
	const struct app_arg *p = arg;

	ei_x_encode_tuple_header(x, 3);
	ei_x_encode_atom(x, "load_app");
	ei_x_encode_binary(x, p->app_text, (long)strlen(p->app_text));
	ei_x_encode_binary(x, p->nif, (long)strlen(p->nif));
}

/* Places the NIF: our private directory if the node reads it (same host,
 * same user), else sent over distribution.  Path without ".so" in out. */
int bp_attach_place_nif(struct bp_attach *a, char *out, size_t n)
{
	char so[PATH_MAX + 32], dst[PATH_MAX + 32], chk[PATH_MAX + 32];
	char nonce[40], *bin;
	size_t len;

	snprintf(so, sizeof so, "%s/priv/beamprobe_nif.so", a->home);
	if (access(so, R_OK) != 0) {
		bp_cli_error("cannot read %s: %s", so, strerror(errno));
		return -1;
	}
	if (a->same_host && !getenv("BEAMPROBE_ATTACH_SEND_NIF")) {
		snprintf(a->nif_dir, sizeof a->nif_dir,
			 "%s/beamprobe-attach-XXXXXX", bp_attach_tmp_base());
		if (!mkdtemp(a->nif_dir)) { /* mode 0700 */
			a->nif_dir[0] = '\0';
		} else {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			snprintf(nonce, sizeof nonce, "%lx%lx%lx",
				 (long)ts.tv_nsec, (long)getpid(),
				 (long)ts.tv_sec);
			snprintf(dst, sizeof dst, "%s/beamprobe_nif.so",
				 a->nif_dir);
			snprintf(chk, sizeof chk, "%s/check", a->nif_dir);
			struct nif_dir_arg d = {a->nif_dir, nonce};
			if (read_file(so, &bin, &len) == 0) {
				int w = write_file(dst, bin, len, 0600) == 0 &&
					write_file(chk, nonce, strlen(nonce),
						   0600) == 0;
				free(bin);
				if (w && bp_attach_request(a, fill_nif_dir, &d, NULL, out,
						 n) == 0)
					return 0;
			}
			bp_attach_remove_dir(a->nif_dir);
			a->nif_dir[0] = '\0';
		}
	}
	if (bp_attach_request(a, fill_place_nif, so, "placing the NIF", out,
			      n) != 0)
		return -1;
	if (a->same_host) { /* out: DIR/beamprobe_nif */
		char *sl = strrchr(out, '/');
		if (sl && (size_t)(sl - out) < sizeof a->node_nif_dir)
			snprintf(a->node_nif_dir, sizeof a->node_nif_dir,
				 "%.*s", (int)(sl - out), out);
	}
	return 0;
}

void bp_attach_remove_node_nif_dir(struct bp_attach *a)
{
	const char *base = bp_attach_tmp_base(), *d = a->node_nif_dir;
	size_t bl = strlen(base);
	struct stat sb;
	DIR *dir;
	struct dirent *e;
	int other = 0;

	if (!d[0] || strncmp(d, base, bl) || d[bl] != '/' ||
	    strncmp(d + bl + 1, "beamprobe-attach-", 17) ||
	    strchr(d + bl + 1, '/') || lstat(d, &sb) != 0 ||
	    !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid() ||
	    (sb.st_mode & 0777) != 0700 || !(dir = opendir(d)))
		return;
	while ((e = readdir(dir)))
		other |= strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
			 strcmp(e->d_name, "beamprobe_nif.so");
	closedir(dir);
	if (!other)
		bp_attach_remove_dir(d);
	a->node_nif_dir[0] = '\0';
}

/* Loads the application and every module of ebin/ but beamprobe_attach. */
int bp_attach_load_all(struct bp_attach *a, const char *nif)
{
	char path[PATH_MAX + 64], *app, out[1024];
	size_t len;
	DIR *d;
	struct dirent *e;
	int rc = 0, count = 0;

	snprintf(path, sizeof path, "%s/ebin/beamprobe.app", a->home);
	if (read_file(path, &app, &len) != 0) {
		bp_cli_error("cannot read %s: %s", path, strerror(errno));
		return -1;
	}
	struct app_arg aa = {app, nif};
	rc = bp_attach_request(a, fill_load_app, &aa, "loading the application", out,
		     sizeof out);
	free(app);
	if (rc)
		return rc;
	snprintf(path, sizeof path, "%s/ebin", a->home);
	if (!(d = opendir(path))) {
		bp_cli_error("%s: %s", path, strerror(errno));
		return -1;
	}
	while (rc == 0 && (e = readdir(d))) {
		size_t l = strlen(e->d_name);
		char mod[256], file[PATH_MAX * 2 + 512];
		if (l < 6 || l >= sizeof mod || strcmp(e->d_name + l - 5, ".beam") ||
		    !strcmp(e->d_name, "beamprobe_attach.beam"))
			continue;
		memcpy(mod, e->d_name, l - 5);
		mod[l - 5] = '\0';
		snprintf(file, sizeof file, "%s/%s", path, e->d_name);
		const char *mb[2] = {mod, file};
		rc = bp_attach_request(a, fill_load, mb, "loading a module", out,
			     sizeof out);
		count++;
	}
	closedir(d);
	return rc;
}

/* ---- the session's messages ------------------------------------------ */

void bp_attach_send_stop(struct bp_attach *a)
{
	ei_x_buff x;

	if (!a->have_agent)
		return;
	ei_x_new_with_version(&x);
	ei_x_encode_tuple_header(&x, 1);
	ei_x_encode_atom(&x, "beamprobe_attach_stop");
	ei_send(a->fd, &a->agent, x.buff, x.index);
	ei_x_free(&x);
}

/* {beamprobe_attach_env, Node, Lines} (--cluster): handed to on_env. */
static void node_env(struct bp_attach *a, const char *buf, int *idx)
{
	char node[512];
	int type, size;
	long len;
	char *data;

	if (ei_get_type(buf, idx, &type, &size) || type != ERL_BINARY_EXT ||
	    size >= (int)sizeof node || ei_decode_binary(buf, idx, node, &len))
		goto bad;
	node[len] = '\0';
	if (ei_get_type(buf, idx, &type, &size) || type != ERL_BINARY_EXT)
		goto bad;
	data = malloc((size_t)size + 1);
	if (!data || ei_decode_binary(buf, idx, data, &len)) {
		free(data);
		goto bad;
	}
	data[len] = '\0';
	if (!a->on_env || a->on_env(a->env_ctx, node, data, (size_t)len) != 0)
		a->write_failed = 1;
	free(data);
	return;
bad:
	bp_cli_error("%s: a malformed clock offsets message (ignored)", a->node);
	a->write_failed = 1;
}

int bp_attach_node_message(struct bp_attach *a, int *done)
{
	erlang_msg msg;
	ei_x_buff x;
	int r, idx = 0, ver, arity;
	char tag[MAXATOMLEN_UTF8], text[2048];

	ei_x_new(&x);
	/* Called when poll() saw data: a whole message or tick follows. */
	r = ei_xreceive_msg(a->fd, &msg, &x);
	if (r == ERL_TICK) {
		ei_x_free(&x);
		return 0;
	}
	if (r == ERL_ERROR) {
		ei_x_free(&x);
		return -1;
	}
	if (msg.msgtype == ERL_SEND || msg.msgtype == ERL_REG_SEND) {
		if (ei_decode_version(x.buff, &idx, &ver) == 0 &&
		    ei_decode_tuple_header(x.buff, &idx, &arity) == 0 &&
		    arity == 2 && ei_decode_atom(x.buff, &idx, tag) == 0 &&
		    !strcmp(tag, "beamprobe_attach_done") &&
		    get_text(x.buff, &idx, text, sizeof text) == 0) {
			fprintf(stderr, "beamprobe: %s: %s\n", a->node, text);
			*done = 1;
		} else if (idx = 0,
			   ei_decode_version(x.buff, &idx, &ver) == 0 &&
			   ei_decode_tuple_header(x.buff, &idx, &arity) == 0 &&
			   arity == 3 &&
			   ei_decode_atom(x.buff, &idx, tag) == 0 &&
			   !strcmp(tag, "beamprobe_attach_env")) {
			node_env(a, x.buff, &idx);
		}
	}
	ei_x_free(&x);
	return 0;
}

/* The directory beamprobe is built or installed in: $BEAMPROBE_HOME, else
 * two levels above this executable (bin/beamprobe). */
int bp_attach_home(char *home, size_t n)
{
	char self[PATH_MAX];
	ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
	const char *env = getenv("BEAMPROBE_HOME");

	if (env) {
		snprintf(home, n, "%s", env);
		return 0;
	}
	if (l <= 0)
		return -1;
	self[l] = '\0';
	for (int i = 0; i < 2; i++) { /* bin/beamprobe -> the install */
		char *sl = strrchr(self, '/');
		if (!sl)
			return -1;
		*sl = '\0';
	}
	snprintf(home, n, "%s", self[0] ? self : "/");
	return 0;
}

/* beamprobe_attach was brought by an attach: is its agent there?  When
 * it is not, even a second later (an attach between loading it and
 * starting its agent takes one call), that attach died in between: the
 * module is removed and which_self says so.  0 if it was an orphan. */
static int orphan(struct bp_attach *a, char *which_self, size_t n)
{
	char out[64];
	struct timespec ts = {1, 0};

	for (int i = 0; i < 2; i++) {
		if (rpc_atom_text(a, "erlang", "whereis",
				  "beamprobe_attach_agent", out,
				  sizeof out) != 0 ||
		    strcmp(out, "undefined"))
			return -1; /* an agent (a pid), or no answer */
		if (i == 0)
			nanosleep(&ts, NULL);
	}
	if (bp_attach_which(a, "beamprobe_attach", which_self, n) ||
	    strncmp(which_self, "beamprobe-attach:", 17))
		return 0; /* gone meanwhile (its attach cleaned up) */
	rpc_atom_text(a, "code", "purge", "beamprobe_attach", out, sizeof out);
	rpc_atom_text(a, "code", "delete", "beamprobe_attach", out,
		      sizeof out);
	rpc_atom_text(a, "code", "purge", "beamprobe_attach", out, sizeof out);
	if (bp_attach_which(a, "beamprobe_attach", which_self, n) ||
	    strcmp(which_self, "non_existing"))
		return -1;
	fprintf(stderr, "beamprobe: %s: removed the beamprobe_attach module "
			"an attach that died before its agent started had "
			"left\n", a->node);
	return 0;
}

/* Steps 1-3 of cmd_attach.c's flow, for commands that run something
 * else than a trace session through the agent (cmd_profile.c). */
int bp_attach_bring(struct bp_attach *a, const char *cookie, char *full,
		    size_t fulln, int *brought)
{
	char which_self[1024], which_bp[1024], nif[PATH_MAX + 64];
	int loaded_self;

	*brought = 0;
	if (bp_attach_connect(a, cookie, full, fulln) != 0)
		return -1;
	bp_attach_peer_info(a);
	if (bp_attach_which(a, "beamprobe_attach", which_self,
			    sizeof which_self) ||
	    bp_attach_which(a, "beamprobe", which_bp, sizeof which_bp))
		return -1;
	if (!strncmp(which_self, "beamprobe-attach:", 17) &&
	    orphan(a, which_self, sizeof which_self) != 0) {
		bp_cli_error("%s: another beamprobe attach or profile is active "
			     "on this node (or one is still cleaning up)", full);
		return -1;
	}
	*brought = !strcmp(which_bp, "non_existing");
	if (*brought && bp_attach_check_versions(a) != 0)
		return -1;
	loaded_self = !bp_attach_module_loaded(a, "beamprobe_attach");
	if (!strcmp(which_self, "non_existing") && bp_attach_load_self(a) != 0)
		return -1;
	/* From here on the agent undoes whatever we bring, even if we die. */
	if (bp_attach_spawn_agent(a, loaded_self) != 0)
		return -1;
	if (*brought && (bp_attach_place_nif(a, nif, sizeof nif) != 0 ||
			 bp_attach_load_all(a, nif) != 0))
		return -1;
	return 0;
}

/* ---- signals ------------------------------------------------------------ */

volatile sig_atomic_t bp_attach_signals;
static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
	int e = errno;

	(void)sig;
	bp_attach_signals++;
	if (write(sig_pipe[1], "x", 1) < 0) {
	}
	errno = e;
}

int bp_attach_catch_signals(void)
{
	struct sigaction sa;

	if (sig_pipe[0] < 0 && pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return -1;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	return sig_pipe[0];
}

void bp_attach_signal_read(int fd)
{
	char b[16];

	while (read(fd, b, sizeof b) > 0) {
	}
}
