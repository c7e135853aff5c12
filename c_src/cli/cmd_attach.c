/* cmd_attach.c -- `beamprobe attach NODE PATTERN...': traces a running
 * node from the command line, as a hidden C node (erl_interface's ei).
 *
 *   1. connects (cookie from --cookie, --cookie-file or ~/.erlang.cookie;
 *      short or long names as NODE is written);
 *   2. if beamprobe is not on the node's code path: checks that the
 *      node's OTP release and architecture are the NIF's (else refuses,
 *      having loaded nothing), loads src/beamprobe_attach.erl's module,
 *      whose agent process (spawned now, before anything else) records
 *      what the node had and owns what attach brings;
 *   3. places the NIF where the node can load it: this user's private
 *      0700 directory when the node reads it (same host, same user), else
 *      sent over distribution into a private directory of the node's;
 *      loads the application and every module (code:load_binary/3);
 *   4. listens for the session's TCP stream (loopback when the node is on
 *      this host), starts the session (agent: beamprobe:start/1 with
 *      output => {tcp, ...}), writes the stream into -o DIR (bp_recv.c)
 *      and prints it live (a `print --follow DIR' child);
 *   5. ^C asks the agent to stop; when the session ends the agent stops
 *      it and undoes everything; if this process dies or the connection
 *      drops, the agent sees nodedown and does the same.
 */
#define _GNU_SOURCE
#include "bp_cli.h"
#include "bp_recv.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ei.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_FAIL 2

struct att {
	ei_cnode ec;
	int fd;
	const char *node;
	char home[PATH_MAX]; /* the install: bin/.. */
	erlang_pid agent;
	int have_agent;
	int same_host;
	char local_ip[INET6_ADDRSTRLEN];
	char nif_dir[PATH_MAX]; /* ours, when we made one */
};

static volatile sig_atomic_t signals;
static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
	int e = errno;
	(void)sig;
	signals++;
	if (write(sig_pipe[1], "x", 1) < 0) {
	}
	errno = e;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

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
static void remove_dir(const char *dir)
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

static const char *tmp_base(void)
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
		if ((size_t)size >= n)
			return -1;
		return ei_decode_string(buf, idx, out);
	case ERL_NIL_EXT:
		return ei_decode_list_header(buf, idx, &size);
	case ERL_BINARY_EXT:
		if ((size_t)size >= n)
			return -1;
		if (ei_decode_binary(buf, idx, out, &len) < 0)
			return -1;
		out[len] = '\0';
		return 0;
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
static int rpc(struct att *a, const char *mod, const char *fun,
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

/* Text of code:which(Mod) (a path, or non_existing, preloaded, ...). */
static int which(struct att *a, const char *mod, char *out, size_t n)
{
	ei_x_buff args, res;
	int idx = 0, rc;

	ei_x_new(&args);
	ei_x_new(&res);
	ei_x_encode_list_header(&args, 1);
	ei_x_encode_atom(&args, mod);
	ei_x_encode_empty_list(&args);
	rc = rpc(a, "code", "which", &args, &res);
	if (rc == 0 && get_text(res.buff, &idx, out, n) != 0)
		snprintf(out, n, "?");
	ei_x_free(&args);
	ei_x_free(&res);
	return rc;
}

/* erlang:module_loaded(Mod) on the node (0 when the call fails). */
static int module_loaded(struct att *a, const char *mod)
{
	ei_x_buff args, res;
	char out[16] = "";
	int idx = 0;

	ei_x_new(&args);
	ei_x_new(&res);
	ei_x_encode_list_header(&args, 1);
	ei_x_encode_atom(&args, mod);
	ei_x_encode_empty_list(&args);
	if (rpc(a, "erlang", "module_loaded", &args, &res) == 0)
		get_text(res.buff, &idx, out, sizeof out);
	ei_x_free(&args);
	ei_x_free(&res);
	return !strcmp(out, "true");
}

static int system_info(struct att *a, const char *key, char *out, size_t n)
{
	ei_x_buff args, res;
	int idx = 0, rc;

	ei_x_new(&args);
	ei_x_new(&res);
	ei_x_encode_list_header(&args, 1);
	ei_x_encode_atom(&args, key);
	ei_x_encode_empty_list(&args);
	rc = rpc(a, "erlang", "system_info", &args, &res);
	if (rc == 0 && get_text(res.buff, &idx, out, n) != 0)
		snprintf(out, n, "?");
	ei_x_free(&args);
	ei_x_free(&res);
	return rc;
}

/* beamprobe_attach:request(Agent, Req) where Req is built by fill().
 * 0 ok (text in out), -1 error (printed). */
static int request(struct att *a, void (*fill)(ei_x_buff *, const void *),
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

static int read_cookie(const char *opt, const char *file, char *out,
		       size_t n)
{
	char path[PATH_MAX], *b;
	size_t len;

	if (opt) {
		snprintf(out, n, "%s", opt);
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
	snprintf(out, n, "%s", b);
	free(b);
	return len ? 0 : -1;
}

static int connect_node(struct att *a, const char *cookie, char *full,
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
static void peer_info(struct att *a)
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
static int check_versions(struct att *a)
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

static int load_self(struct att *a)
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

static int spawn_agent(struct att *a, int loaded_self)
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
		bp_cli_error("%s: the attach agent did not start", a->node);
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
static int place_nif(struct att *a, char *out, size_t n)
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
			 "%s/beamprobe-attach-XXXXXX", tmp_base());
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
				if (w && request(a, fill_nif_dir, &d, NULL, out,
						 n) == 0)
					return 0;
			}
			remove_dir(a->nif_dir);
			a->nif_dir[0] = '\0';
		}
	}
	return request(a, fill_place_nif, so, "placing the NIF", out, n);
}

/* Loads the application and every module of ebin/ but beamprobe_attach. */
static int load_all(struct att *a, const char *nif)
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
	rc = request(a, fill_load_app, &aa, "loading the application", out,
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
		rc = request(a, fill_load, mb, "loading a module", out,
			     sizeof out);
		count++;
	}
	closedir(d);
	return rc;
}

/* ---- the session ----------------------------------------------------- */

struct start_arg {
	char **patterns;
	int npatterns;
	const char *ip;
	int port, remote;
	long seconds, max_events;
	const char *procs, *events, *args;
	int ret;
};

static void fill_start(ei_x_buff *x, const void *arg)
{
	const struct start_arg *s = arg;
	int n = 4 + (s->max_events > 0) + (s->procs != NULL) +
		(s->args != NULL);

	ei_x_encode_tuple_header(x, 3);
	ei_x_encode_atom(x, "start");
	ei_x_encode_list_header(x, s->npatterns);
	for (int i = 0; i < s->npatterns; i++)
		ei_x_encode_binary(x, s->patterns[i],
				   (long)strlen(s->patterns[i]));
	ei_x_encode_empty_list(x);
	ei_x_encode_map_header(x, n);
	ei_x_encode_atom(x, "tcp");
	ei_x_encode_tuple_header(x, 3);
	ei_x_encode_string(x, s->ip);
	ei_x_encode_long(x, s->port);
	ei_x_encode_boolean(x, s->remote);
	ei_x_encode_atom(x, "seconds");
	ei_x_encode_long(x, s->seconds);
	ei_x_encode_atom(x, "return");
	ei_x_encode_boolean(x, s->ret);
	if (s->max_events > 0) {
		ei_x_encode_atom(x, "max_events");
		ei_x_encode_long(x, s->max_events);
	}
	if (s->procs) {
		ei_x_encode_atom(x, "procs");
		ei_x_encode_binary(x, s->procs, (long)strlen(s->procs));
	}
	if (s->args) {
		ei_x_encode_atom(x, "args");
		ei_x_encode_binary(x, s->args, (long)strlen(s->args));
	}
	ei_x_encode_atom(x, "events");
	if (s->events) {
		char buf[512], *save = NULL, *tok;
		snprintf(buf, sizeof buf, "%s", s->events);
		for (tok = strtok_r(buf, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			ei_x_encode_list_header(x, 1);
			ei_x_encode_binary(x, tok, (long)strlen(tok));
		}
	}
	ei_x_encode_empty_list(x);
}

static void send_stop(struct att *a)
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

/* A message from the node: {beamprobe_attach_done, Text} ends the run
 * (1); ticks and others: 0; the connection lost: -1. */
static int node_message(struct att *a, int *done)
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
		}
	}
	ei_x_free(&x);
	return 0;
}

static pid_t start_printer(const char *dir)
{
	pid_t pid = fork();

	if (pid == 0) {
		char self[PATH_MAX];
		ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
		/* Our own ^C goes to us alone (we stop the session, the
		 * printer prints to the end); if we die, it goes too. */
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() == 1)
			_exit(0);
		if (l <= 0)
			_exit(127);
		self[l] = '\0';
		execl(self, "beamprobe", "print", "--follow", dir, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static int wait_child(pid_t pid, int ms)
{
	int st;

	for (int i = 0; i < ms / 10; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return 0;
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	return -1;
}

/* ---- the command ----------------------------------------------------- */

static int find_home(char *home, size_t n)
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

int bp_cmd_attach(int argc, char **argv)
{
	enum { O_COOKIE = 256, O_COOKIE_FILE, O_SECONDS, O_MAX, O_PROCS,
	       O_EVENTS, O_ARGS, O_RETURN, O_NOPRINT };
	static const struct option opts[] = {
		{"cookie", required_argument, 0, O_COOKIE},
		{"cookie-file", required_argument, 0, O_COOKIE_FILE},
		{"output", required_argument, 0, 'o'},
		{"seconds", required_argument, 0, O_SECONDS},
		{"max-events", required_argument, 0, O_MAX},
		{"procs", required_argument, 0, O_PROCS},
		{"events", required_argument, 0, O_EVENTS},
		{"args", required_argument, 0, O_ARGS},
		{"return", no_argument, 0, O_RETURN},
		{"print", no_argument, 0, 'p'},
		{"quiet", no_argument, 0, 'q'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	static struct att a;
	static struct bp_recv r;
	struct start_arg sa;
	struct bp_recv_conn conn;
	struct sigaction sig;
	const char *cookie_opt = NULL, *cookie_file = NULL, *out_dir = NULL;
	char cookie[512], node[512], dir[PATH_MAX], text[2048], which_self[1024],
		which_bp[1024], nif[PATH_MAX + 64];
	int c, print = -1, rc = EXIT_FAIL, lfd = -1, done = 0, lost = 0;
	int tmp_dir = 0, loaded_self = 0;
	long long v;
	pid_t printer = -1;
	uint64_t done_at = 0, lost_at = 0;

	memset(&a, 0, sizeof a);
	memset(&sa, 0, sizeof sa);
	a.fd = -1;
	sa.seconds = 60;
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:pqh", opts, NULL)) != -1) {
		switch (c) {
		case O_COOKIE: cookie_opt = optarg; break;
		case O_COOKIE_FILE: cookie_file = optarg; break;
		case 'o': out_dir = optarg; break;
		case 'p': print = 1; break;
		case 'q': print = 0; break;
		case O_SECONDS:
		case O_MAX:
			if ((v = bp_cli_count(optarg)) < 1 || v > 100000000)
				return bp_cli_usage("attach", "bad number '%s'",
						    optarg);
			if (c == O_SECONDS)
				sa.seconds = (long)v;
			else
				sa.max_events = (long)v;
			break;
		case O_PROCS: sa.procs = optarg; break;
		case O_EVENTS: sa.events = optarg; break;
		case O_ARGS:
			if (strcmp(optarg, "none") && strcmp(optarg, "arity") &&
			    strcmp(optarg, "full"))
				return bp_cli_usage("attach", "--args: none, "
						    "arity or full");
			sa.args = optarg;
			break;
		case O_RETURN: sa.ret = 1; break;
		case 'h': return bp_cli_help("attach");
		default: return bp_cli_usage("attach", "bad option");
		}
	}
	if (argc - optind < 1)
		return bp_cli_usage("attach", "expected NODE and patterns");
	if (argc - optind < 2 && !sa.events)
		return bp_cli_usage("attach", "expected a pattern ('m:f/2', "
				    "'m:f -> return', 'send') or --events");
	if (print < 0)
		print = out_dir == NULL;
	if (!print && !out_dir)
		return bp_cli_usage("attach", "--quiet needs -o DIR");
	snprintf(node, sizeof node, "%s", argv[optind]);
	a.node = node;
	sa.patterns = argv + optind + 1;
	sa.npatterns = argc - optind - 1;
	if (find_home(a.home, sizeof a.home) != 0) {
		bp_cli_error("cannot find beamprobe's files (set BEAMPROBE_HOME)");
		return EXIT_FAIL;
	}
	if (read_cookie(cookie_opt, cookie_file, cookie, sizeof cookie) != 0)
		return BP_EXIT_USAGE;
	if (out_dir) {
		snprintf(dir, sizeof dir, "%s", out_dir);
	} else {
		snprintf(dir, sizeof dir, "%s/beamprobe-trace-XXXXXX",
			 tmp_base());
		if (!mkdtemp(dir)) {
			bp_cli_error("mkdtemp: %s", strerror(errno));
			return EXIT_FAIL;
		}
		tmp_dir = 1;
	}
	if (bp_recv_open(&r, dir) != 0) {
		if (tmp_dir)
			rmdir(dir);
		return BP_EXIT_USAGE;
	}
	r.quiet = 1;
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		goto out;
	memset(&sig, 0, sizeof sig);
	sig.sa_handler = on_signal;
	sigaction(SIGINT, &sig, NULL);
	sigaction(SIGTERM, &sig, NULL);
	sigaction(SIGHUP, &sig, NULL);
	signal(SIGPIPE, SIG_IGN);

	ei_init();
	if (connect_node(&a, cookie, node, sizeof node) != 0)
		goto out;
	peer_info(&a);
	if (which(&a, "beamprobe_attach", which_self, sizeof which_self) ||
	    which(&a, "beamprobe", which_bp, sizeof which_bp))
		goto out;
	if (!strncmp(which_self, "beamprobe-attach:", 17)) {
		bp_cli_error("%s: another beamprobe attach is active on this "
			     "node (or one is still cleaning up)", node);
		goto out;
	}
	int bring = !strcmp(which_bp, "non_existing");
	if (bring && check_versions(&a) != 0)
		goto out;
	/* The agent unloads itself at the end unless it was loaded before
	 * attach came (from the node's own code path, it loads on first
	 * call). */
	loaded_self = !module_loaded(&a, "beamprobe_attach");
	if (!strcmp(which_self, "non_existing") && load_self(&a) != 0)
		goto out;
	/* From here on the agent undoes whatever we bring, even if we die. */
	if (spawn_agent(&a, loaded_self) != 0)
		goto out;
	if (bring && (place_nif(&a, nif, sizeof nif) != 0 ||
		      load_all(&a, nif) != 0))
		goto out;
	char laddr[INET6_ADDRSTRLEN + 8];
	snprintf(laddr, sizeof laddr, strchr(a.local_ip, ':') ? "[%s]:0" : "%s:0",
		 a.local_ip);
	if ((lfd = bp_recv_listen(laddr, &sa.port)) < 0)
		goto out;
	sa.ip = a.local_ip;
	sa.remote = !a.same_host;
	if (request(&a, fill_start, &sa, "cannot start the session", text,
		    sizeof text) != 0)
		goto out;
	fprintf(stderr, "beamprobe: attached to %s%s: %s; tracing for at most "
			"%ld s, ^C to stop\n",
		node, bring ? " (beamprobe brought in)" : "", text,
		sa.seconds);
	fflush(stderr);

	bp_recv_conn_init(&conn, -1);
	for (;;) {
		struct pollfd p[4] = {{sig_pipe[0], POLLIN, 0},
				      {a.fd, POLLIN, 0},
				      {lfd, POLLIN, 0},
				      {conn.fd, POLLIN, 0}};
		int n = poll(p, conn.fd >= 0 ? 4 : 3, 100);
		if (n < 0 && errno != EINTR)
			break;
		if (n > 0 && (p[0].revents & POLLIN)) {
			char b[16];
			while (read(sig_pipe[0], b, sizeof b) > 0) {
			}
			if (signals >= 2 || lost)
				break; /* twice: go now (the node cleans up) */
			fprintf(stderr, "beamprobe: stopping the session on "
					"%s...\n", node);
			send_stop(&a);
		}
		if (n > 0 && !lost && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			if (node_message(&a, &done) < 0) {
				bp_cli_error("lost the connection to %s (the "
					     "node ends the session)", node);
				lost = 1;
				close(a.fd);
				a.fd = -1;
			}
			if (done && !done_at)
				done_at = now_ms();
		}
		if (n > 0 && (p[2].revents & POLLIN)) {
			int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0 && conn.fd >= 0)
				close(fd);
			else if (fd >= 0)
				bp_recv_conn_init(&conn, fd);
		}
		if (n > 0 && conn.fd >= 0 &&
		    (p[3].revents & (POLLIN | POLLHUP | POLLERR))) {
			int k = bp_recv_conn_read(&r, &conn);
			if (k <= 0)
				bp_recv_conn_close(&conn);
		}
		if (print && printer < 0 && r.have_uuid)
			printer = start_printer(dir);
		/* Lost the node: the stream's end (or its loss) ends us. */
		if (lost && (r.ended || conn.fd < 0)) {
			if (!lost_at)
				lost_at = now_ms();
			if (r.ended || now_ms() - lost_at > 1500)
				break;
		}
		if ((done && r.ended) || (done && now_ms() - done_at > 3000))
			break;
	}
	bp_recv_conn_close(&conn);
	rc = done ? BP_EXIT_OK : EXIT_FAIL;
	if (!r.ended && r.have_uuid)
		bp_cli_error("the stream did not end cleanly: the trace in %s "
			     "may miss its last events", dir);
out:
	if (printer > 0)
		wait_child(printer, r.ended ? 5000 : 500);
	if (a.fd >= 0)
		close(a.fd); /* the agent, if still there, cleans up now */
	if (lfd >= 0)
		close(lfd);
	if (a.nif_dir[0]) {
		/* The agent removed it; if it could not, we do. */
		remove_dir(a.nif_dir);
	}
	bp_recv_close(&r);
	if (tmp_dir)
		remove_dir(dir);
	else if (rc == BP_EXIT_OK && print == 0)
		fprintf(stderr, "beamprobe: trace written to %s\n", dir);
	return rc;
}
