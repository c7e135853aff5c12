/* bp_attach_rpc.c -- calls into the node from the hidden C node of
 * `beamprobe attach' (bp_attach_rpc.h): rpc through erl_interface's ei,
 * the texts of their replies, and the requests to the attach agent
 * (src/beamprobe_attach.erl's request/2).
 */
#include "bp_attach_rpc.h"
#include "bp_cli.h"

#include <ei.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Decodes a string, binary, atom or [] at *idx into out. */
int bp_attach_get_text(const char *buf, int *idx, char *out, size_t n)
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
int bp_attach_rpc(struct bp_attach *a, const char *mod, const char *fun,
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
	    bp_attach_get_text(res->buff, &idx, out, n) == 0) {
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
int bp_attach_rpc_atom_text(struct bp_attach *a, const char *m,
			    const char *f, const char *atom, char *out,
			    size_t n)
{
	ei_x_buff args, res;
	int idx = 0, rc;

	ei_x_new(&args);
	ei_x_new(&res);
	ei_x_encode_list_header(&args, 1);
	ei_x_encode_atom(&args, atom);
	ei_x_encode_empty_list(&args);
	rc = bp_attach_rpc(a, m, f, &args, &res);
	if (rc == 0 && bp_attach_get_text(res.buff, &idx, out, n) != 0)
		snprintf(out, n, "?");
	ei_x_free(&args);
	ei_x_free(&res);
	return rc;
}

/* Text of code:which(Mod) (a path, or non_existing, preloaded, ...). */
int bp_attach_which(struct bp_attach *a, const char *mod, char *out,
		    size_t n)
{
	return bp_attach_rpc_atom_text(a, "code", "which", mod, out, n);
}

/* erlang:module_loaded(Mod) on the node (0 when the call fails). */
int bp_attach_module_loaded(struct bp_attach *a, const char *mod)
{
	char out[16] = "";

	return bp_attach_rpc_atom_text(a, "erlang", "module_loaded", mod, out,
			     sizeof out) == 0 && !strcmp(out, "true");
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
	rc = bp_attach_rpc(a, "beamprobe_attach", "request", &args, &res);
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
