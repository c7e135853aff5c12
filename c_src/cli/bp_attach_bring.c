/* bp_attach_bring.c -- bringing beamprobe to a node that lacks it
 * (bp_attach_bring.h): the version check against the NIF's build info,
 * loading src/beamprobe_attach.erl's module and spawning its agent (which
 * undoes the rest), placing the NIF where the node can load it, loading
 * the application and its modules; an orphan beamprobe_attach module
 * removed; steps 1-3 of an attach in one call (bp_attach_bring()).
 */
#define _GNU_SOURCE
#include "bp_attach_bring.h"
#include "bp_attach_files.h"
#include "bp_attach_rpc.h"
#include "bp_cli.h"

#include <dirent.h>
#include <ei.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* erlang:system_info(Key) on the node, as text. */
static int system_info(struct bp_attach *a, const char *key, char *out,
		       size_t n)
{
	return bp_attach_rpc_atom_text(a, "erlang", "system_info", key, out,
				       n);
}

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
	if (bp_attach_read_file(env ? env : path, &info, &len) != 0) {
		bp_cli_error("cannot read %s: %s (build beamprobe first, or "
			     "set BEAMPROBE_HOME to the directory of its "
			     "ebin/ and priv/)",
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
	if (bp_attach_read_file(mb[1], &bin, &len) == 0) {
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
	if (bp_attach_read_file(path, &bin, &len) != 0) {
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
	rc = bp_attach_rpc(a, "code", "load_binary", &args, &res);
	if (rc == 0 && (ei_decode_tuple_header(res.buff, &idx, &arity) ||
			bp_attach_get_text(res.buff, &idx, out, sizeof out) ||
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
	rc = bp_attach_rpc(a, "beamprobe_attach", "spawn_agent", &args, &res);
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
	if (bp_attach_read_file(path, &bin, &len) == 0) {
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

/* On this host, the directory of the library the agent placed (out:
 * DIR/beamprobe_nif), for bp_attach_remove_node_nif_dir. */
static void node_nif_dir(struct bp_attach *a, const char *out)
{
	const char *sl = strrchr(out, '/');

	if (a->same_host && sl && (size_t)(sl - out) < sizeof a->node_nif_dir)
		snprintf(a->node_nif_dir, sizeof a->node_nif_dir, "%.*s",
			 (int)(sl - out), out);
}

/* Places the NIF: our private directory if the node reads it (same host,
 * same user; the agent places it from there, at a path named by the node
 * and the library, so that the node maps one copy for every attach that
 * brings the same one), else sent over distribution.  Path without ".so"
 * in out. */
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
			/* The check proves the node reads the directory
			 * the command line wrote: unguessable, from the
			 * kernel's generator (was the clock and the pid). */
			uint8_t rnd[16];
			if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd) {
				bp_cli_error("getrandom: %s",
					     strerror(errno));
				bp_attach_remove_dir(a->nif_dir);
				a->nif_dir[0] = '\0';
				return -1;
			}
			for (size_t i = 0; i < sizeof rnd; i++)
				snprintf(nonce + 2 * i, 3, "%02x", rnd[i]);
			snprintf(dst, sizeof dst, "%s/beamprobe_nif.so",
				 a->nif_dir);
			snprintf(chk, sizeof chk, "%s/check", a->nif_dir);
			struct nif_dir_arg d = {a->nif_dir, nonce};
			if (bp_attach_read_file(so, &bin, &len) == 0) {
				int w = bp_attach_write_file(dst, bin, len,
							     0600) == 0 &&
					bp_attach_write_file(chk, nonce,
							     strlen(nonce),
							     0600) == 0;
				free(bin);
				if (w && bp_attach_request(a, fill_nif_dir, &d, NULL,
							   out, n) == 0) {
					/* The agent placed the library from
					 * it, in a directory of its own. */
					node_nif_dir(a, out);
					return 0;
				}
			}
			bp_attach_remove_dir(a->nif_dir);
			a->nif_dir[0] = '\0';
		}
	}
	if (bp_attach_request(a, fill_place_nif, so, "placing the NIF", out,
			      n) != 0)
		return -1;
	node_nif_dir(a, out);
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
	    (strncmp(d + bl + 1, "beamprobe-attach-", 17) &&
	     strncmp(d + bl + 1, "beamprobe-nif-", 14)) ||
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
	if (bp_attach_read_file(path, &app, &len) != 0) {
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
		/* beamprobe's Erlang modules only: an installed ebin/ also
		 * holds the Elixir API (Elixir.Beamprobe*), which attach
		 * does not use and would leave loaded. */
		if (l < 6 || l >= sizeof mod || strcmp(e->d_name + l - 5, ".beam") ||
		    strncmp(e->d_name, "beamprobe", 9) ||
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

/* beamprobe_attach was brought by an attach: is its agent there?  When
 * it is not, even a second later (an attach between loading it and
 * starting its agent takes one call), that attach died in between: the
 * module is removed and which_self says so.  0 if it was an orphan. */
static int orphan(struct bp_attach *a, char *which_self, size_t n)
{
	char out[64];
	struct timespec ts = {1, 0};

	for (int i = 0; i < 2; i++) {
		if (bp_attach_rpc_atom_text(a, "erlang", "whereis",
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
	bp_attach_rpc_atom_text(a, "code", "purge", "beamprobe_attach", out,
				sizeof out);
	bp_attach_rpc_atom_text(a, "code", "delete", "beamprobe_attach", out,
				sizeof out);
	bp_attach_rpc_atom_text(a, "code", "purge", "beamprobe_attach", out,
				sizeof out);
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
	/* Ours to unload at the end: the module we load (which said it was
	 * not there), or one on the node's code path not loaded yet.  (Asked
	 * after `which', module_loaded/1 could see the module another attach
	 * loaded in between: both attaches then left it to the other, the
	 * refused one and the one whose agent ran, and it stayed loaded.) */
	loaded_self = !strcmp(which_self, "non_existing") ||
		      !bp_attach_module_loaded(a, "beamprobe_attach");
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
