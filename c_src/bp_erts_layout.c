/* bp_erts_layout.c -- the slow parts of reading terms from the VM's
 * layout (bp_erts_layout.h): which release lays terms out as this file
 * knows, binaries, fun entries, and the pid text checked against %T. */
#include "bp_erts_layout.h"
#include "bp_pid_text.h"

#include <stdatomic.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

atomic_int bp_erts_known = -1;

static int release_known(void)
{
	ErlNifSysInfo si;

	memset(&si, 0, sizeof si);
	enif_system_info(&si, sizeof si);
	return sizeof(ERL_NIF_TERM) == 8 && si.otp_release &&
	       (!strcmp(si.otp_release, "24") || !strcmp(si.otp_release, "25"));
}

/* Without load() (the library's own decision comes from there). */
NOINLINE int bp__erts_layout_probe(void)
{
	int v = release_known();

	atomic_store_explicit(&bp_erts_known, v, memory_order_relaxed);
	return v;
}

/* Terms of every kind the renderer reads from its words, made by the VM
 * and read back as bp_erts_layout.h reads them. */
static int terms_known(ErlNifEnv *env)
{
	ERL_NIF_TERM nil = enif_make_list(env, 0), keys[2], vals[2], m, hd, tl;
	ERL_NIF_TERM tup = enif_make_tuple2(env, enif_make_int(env, 7), nil);
	ERL_NIF_TERM cons = enif_make_list_cell(env, enif_make_int(env, -3), nil);
	const ERL_NIF_TERM *e, *ks, *vs;
	size_t n;
	double d;
	int64_t v;
	int arity;

	keys[0] = enif_make_atom(env, "a");
	keys[1] = enif_make_atom(env, "b");
	vals[0] = enif_make_int(env, 1);
	vals[1] = enif_make_double(env, 2.5);
	if (!enif_make_map_from_arrays(env, keys, vals, 2, &m))
		return 0;
	return nil == ERTS_NIL &&
	       (keys[0] & ERTS_IMMED2_MASK) == ERTS_IMMED2_ATOM &&
	       bp_erts_float(vals[1], &d) && d == 2.5 &&
	       bp_erts_tuple(tup, &arity, &e) && arity == 2 &&
	       bp_erts_small(e[0], &v) && v == 7 && e[1] == nil &&
	       bp_erts_cell(cons, &hd, &tl) && bp_erts_small(hd, &v) &&
	       v == -3 && tl == nil &&
	       bp_erts_flatmap(m, &n, &ks, &vs) && n == 2 &&
	       ks[0] == keys[0] && ks[1] == keys[1] && vs[0] == vals[0] &&
	       vs[1] == vals[1];
}

void bp_erts_layout_check(ErlNifEnv *env)
{
	int v = release_known();

	/* the accessors below read only while bp_erts_known is 1 */
	atomic_store_explicit(&bp_erts_known, v, memory_order_relaxed);
	if (v && !terms_known(env))
		atomic_store_explicit(&bp_erts_known, 0, memory_order_relaxed);
}

/* Reads the bitstring t from the ERTS layout (bp_erts_layout.h). */
int bp_erts_bin_view(ERL_NIF_TERM t, struct bview *v)
{
	const ERL_NIF_UINT *h = bp_erts_boxed(t), *o;
	ERL_NIF_UINT tag, osize, offs = 0;

	if (!h)
		return 0;
	tag = h[0] & ERTS_HEADER_TAG_MASK;
	v->size = h[1];
	v->bitoffs = v->bitsize = 0;
	o = h;
	if (tag == ERTS_HEADER_SUB_BIN) {
		const struct erts_sub_bin *sb = (const void *)h;

		offs = sb->offs;
		v->bitoffs = sb->bitoffs;
		v->bitsize = sb->bitsize;
		if (v->bitoffs > 7 || v->bitsize > 7 || !(o = bp_erts_boxed(sb->orig)))
			return 0;
		tag = o[0] & ERTS_HEADER_TAG_MASK;
	}
	osize = o[1];
	if (tag == ERTS_HEADER_REFC_BIN)
		v->p = ((const struct erts_proc_bin *)o)->bytes;
	else if (tag == ERTS_HEADER_HEAP_BIN)
		v->p = (const unsigned char *)(o + 2);
	else
		return 0;
	/* the bits shown must lie inside the original binary */
	if (!v->p || offs > osize || v->size > osize - offs ||
	    (v->bitoffs + v->bitsize + 7) / 8 > osize - offs - v->size)
		return 0;
	v->p += offs;
	return 1;
}

/* ErlFunThing and ErlFunEntry of OTP 25 (64-bit), as far as %T reads
 * them for a local fun: the header (FUN_SUBTAG), the entry pointer in
 * word 1, the creator in word 4 (a pid for a local fun, the atom
 * 'external' for fun M:F/A); in the entry, the module atom at byte 32,
 * the index at 48 and the old uniq at 68 (found by dumping funs of OTP
 * 25.2.3 next to their %T text).  A text is cached only when its index
 * and uniq are the values read, and served only to a fun whose entry
 * pointer and fields are unchanged; the module word is compared, never
 * interpreted. */
#define ERTS_HEADER_FUN 0x14
#define FUN_ENTRY_MODULE 32
#define FUN_ENTRY_INDEX 48
#define FUN_ENTRY_UNIQ 68

/* 1 if the running VM is OTP 25 (the fun layout above).  Asked once. */
static NOINLINE int fun_layout_check(void)
{
	static atomic_int known = -1;
	int v = atomic_load_explicit(&known, memory_order_relaxed);
	ErlNifSysInfo si;

	if (v >= 0)
		return v;
	memset(&si, 0, sizeof si);
	enif_system_info(&si, sizeof si);
	v = sizeof(ERL_NIF_TERM) == 8 && si.otp_release &&
	    !strcmp(si.otp_release, "25");
	atomic_store_explicit(&known, v, memory_order_relaxed);
	return v;
}

/* The fields of local fun t's entry; 0 if t is not a local fun of the
 * layout above (nothing but its own words is read then). */
int bp_erts_fun_fields(ERL_NIF_TERM t, struct bp_term_fun *f)
{
	const ERL_NIF_UINT *p = bp_erts_boxed(t);
	const unsigned char *fe;

	if (!p || !fun_layout_check() ||
	    (p[0] & ERTS_HEADER_TAG_MASK) != ERTS_HEADER_FUN ||
	    (p[4] & ERTS_IMMED1_MASK) != ERTS_IMMED1_PID || !p[1])
		return 0;
	fe = (const unsigned char *)(uintptr_t)p[1];
	f->fe = (uint64_t)p[1];
	memcpy(&f->module, fe + FUN_ENTRY_MODULE, 8);
	memcpy(&f->index, fe + FUN_ENTRY_INDEX, 4);
	memcpy(&f->uniq, fe + FUN_ENTRY_UNIQ, 4);
	return 1;
}

/* 1 if text (%T of a local fun) ends in ".<index>.<uniq>>", the values
 * read from the fun's entry. */
int bp_erts_fun_text_matches(const char *text, size_t n,
			     const struct bp_term_fun *f)
{
	char tail[40];
	size_t k = 0;

	for (int i = 0; i < 2; i++) {
		int32_t v = i ? f->uniq : f->index;

		tail[k++] = '.';
		if (v < 0) {
			tail[k++] = '-';
			k += bp_digits_u64(tail + k, 0 - (uint64_t)(int64_t)v);
		} else {
			k += bp_digits_u64(tail + k, (uint64_t)v);
		}
	}
	tail[k++] = '>';
	return n > k + 5 && !memcmp(text, "#Fun<", 5) &&
	       !memcmp(text + n - k, tail, k);
}

/*
 * The text of a local pid, "<0.Number.Serial>", from its immediate word
 * (bp_pid_text.h) without enif_snprintf, whose formatter costs ~1 us.
 * The decoding is checked against %T on the first PID_VERIFY local pids
 * this VM renders whose serial is 0 and on the first PID_VERIFY whose
 * serial is not (the only ones a number/serial split elsewhere would
 * print differently); one disagreement and it is never used again (every
 * pid then goes through %T).  Returns 1 with the text in out, 0 if not
 * used.  (Before 2026-11-24 the number was taken as 28 bits and every
 * word's upper bits as the serial: the check failed on the first pid and
 * every pid went through %T.)
 */
#define PID_VERIFY 32

/* Agreements seen, for serial 0 [0] and serial > 0 [1]; -1: off. */
static atomic_int pid_checks[2];

int bp_erts_pid_text(ERL_NIF_TERM t, char *out, size_t *len)
{
	int big = bp_pid_data((uint64_t)t) >= (1u << 15), v, off;

	if (sizeof(ERL_NIF_TERM) != 8 ||
	    (t & ERTS_IMMED1_MASK) != ERTS_IMMED1_PID || !bp_erts_layout_ok())
		return 0;
	v = atomic_load_explicit(&pid_checks[big], memory_order_relaxed);
	off = atomic_load_explicit(&pid_checks[!big], memory_order_relaxed);
	if (v < 0 || off < 0)
		return 0;
	*len = bp_pid_text((uint64_t)t, out);
	if (v >= PID_VERIFY)
		return 1;
	{
		char ref[64];
		int n = enif_snprintf(ref, sizeof ref, "%T", t);

		if (n <= 0 || (size_t)n != *len || memcmp(ref, out, *len)) {
			atomic_store_explicit(&pid_checks[big], -1,
					      memory_order_relaxed);
			return 0;
		}
		atomic_compare_exchange_strong(&pid_checks[big], &v, v + 1);
		return 1;
	}
}

