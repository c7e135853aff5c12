/* export_profile.c -- the aggregated profiles of `beamprobe export`:
 *   folded     one line per distinct stack, "proc;m:f/1;m:g/2 NS", weighted
 *              by exclusive (own) time in ns: the input of flamegraph.pl,
 *              speedscope and inferno.  Stacks are nodes of a tree keyed
 *              by (parent node, function); memory is bounded by the
 *              number of distinct stacks.
 *   callgrind  self cost per function and inclusive cost per call edge
 *              (caller -> callee), in the callgrind format read by
 *              kcachegrind and callgrind_annotate; one event, "ns".
 * Frames count as in `stats` (calls still open at the end end there,
 * bp_model.h), so the folded weights sum to stats' total_own_ns.
 *
 * Folded stacks stay linear in size whatever the recursion depth:
 * direct recursion (f calling f) is one frame, written "m:f/1[rec]"
 * when it recursed, and a stack deeper than FOLDED_MAX_DEPTH frames (mutual
 * recursion) is cut there: deeper frames are charged to one frame
 * "[deeper]" at that depth.
 */
#include "bp_export.h"
#include "bp_cli.h"
#include "bp_model.h"

#include <stdlib.h>
#include <string.h>

#define FOLDED_MAX_DEPTH 256
#define FUNC_DEEPER (BP_MAP_NONE - 1) /* the "[deeper]" frame */

struct node {
	uint32_t parent;      /* node id, or BP_MAP_NONE for a root */
	uint32_t func;        /* function id; for a root: process index */
	uint32_t depth;       /* 0 for a root */
	uint32_t rec;         /* 1: direct recursion folded into it */
	uint64_t own;
};

struct edge {
	uint32_t caller, callee;
	uint64_t calls, incl;
};

struct prof {
	struct bp_model m;
	struct bp_map idx;      /* hash(parent, func) or hash(caller,
				 * callee) -> node / edge */
	struct node *nodes;
	struct edge *edges;
	uint32_t n, cap;        /* nodes or edges */
	uint64_t *self;         /* callgrind: own ns by function id */
	uint32_t nself;
	int callgrind;
	int oom;
};

/* Finds or adds the element (a, b); returns its index or BP_MAP_NONE. */
static uint32_t lookup(struct prof *pf, uint32_t a, uint32_t b)
{
	uint64_t key = ((uint64_t)a << 32 | b) * 0x9e3779b97f4a7c15ull;
	uint32_t i;

	for (;; key++) { /* probe on the rare hash collision */
		i = bp_map_get(&pf->idx, key);
		if (i == BP_MAP_NONE)
			break;
		if (pf->callgrind ? (pf->edges[i].caller == a &&
				     pf->edges[i].callee == b)
				  : (pf->nodes[i].parent == a &&
				     pf->nodes[i].func == b))
			return i;
	}
	if (pf->n == pf->cap) {
		uint32_t cap = pf->cap ? pf->cap * 2 : 1024;
		void *v = pf->callgrind
				  ? realloc(pf->edges, cap * sizeof *pf->edges)
				  : realloc(pf->nodes, cap * sizeof *pf->nodes);
		if (!v)
			goto oom;
		if (pf->callgrind)
			pf->edges = v;
		else
			pf->nodes = v;
		pf->cap = cap;
	}
	i = pf->n;
	if (bp_map_put(&pf->idx, key, i) != 0)
		goto oom;
	if (pf->callgrind)
		pf->edges[i] = (struct edge){a, b, 0, 0};
	else
		pf->nodes[i] = (struct node){
			a, b, a == BP_MAP_NONE ? 0 : pf->nodes[a].depth + 1, 0,
			0};
	pf->n++;
	return i;
oom:
	pf->oom = 1;
	return BP_MAP_NONE;
}

static void on_end(void *ctx, const struct bp_frame_end *fe)
{
	struct prof *pf = ctx;

	if (!pf->callgrind) {
		if (fe->frame->user != BP_MAP_NONE)
			pf->nodes[fe->frame->user].own += fe->own;
		return;
	}
	uint32_t f = fe->frame->func;
	if (f >= pf->nself) {
		uint32_t n = pf->nself ? pf->nself : 256;
		while (n <= f)
			n *= 2;
		uint64_t *v = realloc(pf->self, n * sizeof *v);
		if (!v) {
			pf->oom = 1;
			return;
		}
		memset(v + pf->nself, 0, (n - pf->nself) * sizeof *v);
		pf->self = v;
		pf->nself = n;
	}
	pf->self[f] += fe->own;
	if (fe->parent) {
		uint32_t i = lookup(pf, fe->parent->func, f);
		if (i != BP_MAP_NONE) {
			pf->edges[i].calls++;
			pf->edges[i].incl += fe->incl;
		}
	}
}

/* Replays the trace; for folded, tags each new frame with its node. */
static void replay(struct prof *pf, struct bp_reader *r)
{
	const struct bp_event *e;

	bp_model_init(&pf->m, on_end, pf);
	bp_model_read_env(&pf->m, &r->meta);
	while ((e = bp_reader_next(r))) {
		struct bp_proc *p = e->pid ? bp_model_proc(&pf->m, e->pid) : NULL;
		uint32_t depth = p ? p->depth : 0;
		bp_model_apply_to(&pf->m, p, e);
		if (pf->callgrind || e->id != BP_EV_CALL || !p ||
		    p->depth <= depth)
			continue;
		struct bp_frame *f = &p->stack[p->depth - 1];
		uint32_t parent = p->depth > 1 ? p->stack[p->depth - 2].user
					       : lookup(pf, BP_MAP_NONE,
							p->index);
		if (parent == BP_MAP_NONE) {
			f->user = BP_MAP_NONE;
		} else if (pf->nodes[parent].func == FUNC_DEEPER ||
			   (pf->nodes[parent].depth &&
			    pf->nodes[parent].func == f->func)) {
			f->user = parent; /* direct recursion, or too deep */
			if (pf->nodes[parent].func == f->func)
				pf->nodes[parent].rec = 1;
		} else {
			f->user = lookup(pf, parent,
					 pf->nodes[parent].depth >=
							 FOLDED_MAX_DEPTH
						 ? FUNC_DEEPER
						 : f->func);
		}
	}
	bp_model_finish(&pf->m);
}

/* Folded-format frame text: ';' and ' ' would split it. */
static void frame_text(struct bp_out *o, const char *s)
{
	for (; *s; s++) {
		char c = *s;
		bp_out_char(o, c == ';' ? ',' : c == ' ' ? '_'
				   : (unsigned char)c < 0x20 ? '?' : c);
	}
}

int bp_export_folded(struct bp_reader *r, struct bp_out *o)
{
	struct prof pf;
	uint32_t *path = malloc(sizeof(uint32_t) * (BP_MODEL_MAX_DEPTH + 1));

	memset(&pf, 0, sizeof pf);
	if (!path) {
		bp_cli_error("out of memory");
		return -1;
	}
	replay(&pf, r);
	for (uint32_t i = 0; i < pf.n; i++) {
		uint32_t n = 0, k = i;
		if (!pf.nodes[i].own || pf.nodes[i].parent == BP_MAP_NONE)
			continue;
		while (k != BP_MAP_NONE && n <= BP_MODEL_MAX_DEPTH) {
			path[n++] = k;
			k = pf.nodes[k].parent;
		}
		/* path[n-1] is the process root. */
		const struct bp_proc *p = pf.m.procs[pf.nodes[path[n - 1]].func];
		frame_text(o, bp_proc_last_name(p) ? bp_proc_last_name(p)
						   : bp_proc_text(p));
		for (uint32_t j = n - 1; j-- > 0;) {
			const struct node *nd = &pf.nodes[path[j]];
			bp_out_char(o, ';');
			if (nd->func == FUNC_DEEPER) {
				bp_out_str(o, "[deeper]");
				continue;
			}
			frame_text(o, bp_model_func_name(&pf.m, nd->func));
			if (nd->rec)
				bp_out_str(o, "[rec]");
		}
		bp_out_char(o, ' ');
		bp_out_u64(o, pf.nodes[i].own);
		bp_out_char(o, '\n');
	}
	free(path);
	int oom = pf.oom || pf.m.oom;
	bp_model_free(&pf.m);
	bp_map_free(&pf.idx);
	free(pf.nodes);
	if (oom)
		bp_cli_error("out of memory: export incomplete");
	return oom ? -1 : 0;
}

static int cmp_edges(const void *a, const void *b)
{
	const struct edge *x = a, *y = b;
	if (x->caller != y->caller)
		return x->caller < y->caller ? -1 : 1;
	return x->callee < y->callee ? -1 : x->callee > y->callee;
}

/* "fl=(id) module.erl" then "fn=(id) m:f/a" (or cfi/cfn), with the
 * callgrind name compression: a name is spelled out only the first time
 * its id is used.  Files are numbered by module (in mods). */
static void cg_name(struct bp_out *o, const struct prof *pf,
		    struct bp_strtab *mods, uint32_t f, uint8_t *seen,
		    int callee)
{
	const char *name = bp_model_func_name(&pf->m, f);
	const char *colon = strchr(name, ':');
	size_t modlen = colon ? (size_t)(colon - name) : strlen(name);
	uint32_t known = mods->n, mod = bp_strtab_intern(mods, name, modlen);

	bp_out_str(o, callee ? "cfi=(" : "fl=(");
	bp_out_u64(o, (uint64_t)mod + 1);
	bp_out_char(o, ')');
	if (mod >= known) { /* new module (or BP_MAP_NONE: repeat name) */
		bp_out_char(o, ' ');
		bp_out_mem(o, name, modlen);
		bp_out_str(o, ".erl");
	}
	bp_out_str(o, callee ? "\ncfn=(" : "\nfn=(");
	bp_out_u64(o, (uint64_t)f + 1);
	bp_out_char(o, ')');
	if (!seen[f]) {
		bp_out_char(o, ' ');
		bp_out_str(o, name);
		seen[f] = 1;
	}
	bp_out_char(o, '\n');
}

int bp_export_callgrind(struct bp_reader *r, struct bp_out *o)
{
	struct prof pf;
	struct bp_strtab mods;
	uint64_t total = 0;
	uint8_t *seen;

	memset(&pf, 0, sizeof pf);
	pf.callgrind = 1;
	bp_strtab_init(&mods);
	replay(&pf, r);
	seen = calloc(pf.m.funcs.n + 1, 1);
	if (!seen)
		pf.oom = 1;
	for (uint32_t f = 0; f < pf.nself; f++)
		total += pf.self[f];
	if (pf.n)
		qsort(pf.edges, pf.n, sizeof *pf.edges, cmp_edges);
	bp_out_str(o, "# callgrind format\nversion: 1\ncreator: beamprobe "
		      BP_VERSION "\ncmd: ");
	bp_out_str(o, r->dir);
	bp_out_str(o, "\npositions: line\nevents: ns\nsummary: ");
	bp_out_u64(o, total);
	bp_out_str(o, "\n\n");
	for (uint32_t f = 0, e = 0; seen && f < pf.m.funcs.n; f++) {
		uint64_t self = f < pf.nself ? pf.self[f] : 0;
		int has_edges = e < pf.n && pf.edges[e].caller == f;
		if (!self && !has_edges)
			continue;
		cg_name(o, &pf, &mods, f, seen, 0);
		bp_out_str(o, "0 ");
		bp_out_u64(o, self);
		bp_out_char(o, '\n');
		for (; e < pf.n && pf.edges[e].caller == f; e++) {
			cg_name(o, &pf, &mods, pf.edges[e].callee, seen, 1);
			bp_out_str(o, "calls=");
			bp_out_u64(o, pf.edges[e].calls);
			bp_out_str(o, " 0\n0 ");
			bp_out_u64(o, pf.edges[e].incl);
			bp_out_char(o, '\n');
		}
		bp_out_char(o, '\n');
	}
	bp_out_str(o, "totals: ");
	bp_out_u64(o, total);
	bp_out_char(o, '\n');
	free(seen);
	bp_strtab_free(&mods);
	int oom = pf.oom || pf.m.oom;
	bp_model_free(&pf.m);
	bp_map_free(&pf.idx);
	free(pf.edges);
	free(pf.self);
	if (oom)
		bp_cli_error("out of memory: export incomplete");
	return oom ? -1 : 0;
}
