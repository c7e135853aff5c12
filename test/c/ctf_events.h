/* ctf_events.h -- the beamprobe event classes written out by hand from
 * the BP_FIELDS_* lists of c_src/bp_format.h, and an encoder/decoder for
 * them, for test_ctf.c.  Deliberately independent of bp_event_descs and of
 * bp_format.h's little-endian helpers, so that the tests compare the code
 * with the documented format rather than with itself.
 */
#ifndef BP_TEST_CTF_EVENTS_H
#define BP_TEST_CTF_EVENTS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bp_ctf.h"
#include "tap.h"


/* ---- event classes, by hand from bp_format.h ----------------------------- */

/* Field types: b = u8, w = u32, q = u64, s = string. */
struct cls {
	const char *name;
	const char *types;
	const char *fields[9];
};

#define GC_FIELDS                                                         \
	{"heap_size", "heap_block_size", "old_heap_size",                 \
	 "old_heap_block_size", "mbuf_size", "stack_size"}

static const struct cls classes[] = {
	[0] = {"process", "sss", {"pid", "name", "initial_call"}},
	[1] = {"call", "sss", {"mfa", "args", "info"}},
	[2] = {"return_from", "ss", {"mfa", "result"}},
	[3] = {"exception_from", "sss", {"mfa", "class", "reason"}},
	[4] = {"return_to", "s", {"mfa"}},
	[5] = {"send", "qss", {"to", "to_text", "message"}},
	[6] = {"send_to_non_existing_process", "qss",
	       {"to", "to_text", "message"}},
	[7] = {"receive", "s", {"message"}},
	[8] = {"spawn", "qss", {"other", "other_text", "mfa"}},
	[9] = {"spawned", "qss", {"other", "other_text", "mfa"}},
	[10] = {"exit", "s", {"reason"}},
	[11] = {"link", "qs", {"other", "other_text"}},
	[12] = {"unlink", "qs", {"other", "other_text"}},
	[13] = {"getting_linked", "qs", {"other", "other_text"}},
	[14] = {"getting_unlinked", "qs", {"other", "other_text"}},
	[15] = {"register", "s", {"name"}},
	[16] = {"unregister", "s", {"name"}},
	[17] = {"sched_in", "sb", {"mfa", "exiting"}},
	[18] = {"sched_out", "sb", {"mfa", "exiting"}},
	[19] = {"gc_minor_start", "qqqqqq", GC_FIELDS},
	[20] = {"gc_minor_end", "qqqqqq", GC_FIELDS},
	[21] = {"gc_major_start", "qqqqqq", GC_FIELDS},
	[22] = {"gc_major_end", "qqqqqq", GC_FIELDS},
	[23] = {"port_open", "qss", {"other", "other_text", "name"}},
	[24] = {"port_closed", "s", {"reason"}},
	[25] = {"drops", "qqqqqqqqq",
		{"ring_full", "overwritten", "too_big", "limit", "rate",
		 "stopped", "no_buffer", "dumping", "io_error"}},
	[26] = {"tampered", "ssss", {"what", "subject", "how", "detail"}},
	[27] = {"monitor", "ssqss",
		{"what", "process", "duration_ms", "port", "detail"}},
	[28] = {"sample", "sqws", {"counter", "value", "scale", "process"}},
	[29] = {"annotation", "ss", {"tag", "value"}},
};
#define NCLASSES (sizeof classes / sizeof classes[0])

/* ---- building events ------------------------------------------------------- */

#define MAXF 9
#define STRMAX 48

struct tev {
	unsigned id;
	int stream;
	uint64_t ts;      /* as given to the writer */
	uint64_t ts_out;  /* as expected in the file (clamped) */
	uint64_t pid;
	uint64_t u[MAXF];
	char s[MAXF][STRMAX];
	uint8_t enc[512];
	uint32_t len;
};

static const char *const mfas[] = {"lists:seq/2", "gen_server:call/3",
				   "erlang:apply/2", "maps:get/2"};

/* Fills in deterministic values for event number i of class id. */
static void make_event(struct tev *e, unsigned id, int stream, unsigned i)
{
	const struct cls *c = &classes[id];

	memset(e, 0, sizeof *e);
	e->id = id;
	e->stream = stream;
	e->pid = 0x1000 + 17u * i + (uint64_t)stream * 100000u;
	for (unsigned f = 0; c->types[f]; f++) {
		const char *fn = c->fields[f];
		switch (c->types[f]) {
		case 'b':
			e->u[f] = i % 2;
			break;
		case 'w':
			e->u[f] = 70000u + i;
			break;
		case 'q':
			/* A large value now and then: the full 64 bits. */
			e->u[f] = i % 7 == 3 ? UINT64_MAX - i
					     : 1000u * i + f;
			break;
		case 's':
			if (strcmp(fn, "mfa") == 0 ||
			    strcmp(fn, "initial_call") == 0)
				snprintf(e->s[f], STRMAX, "%s",
					 mfas[i % 4]);
			else if (strstr(fn, "_text") || strcmp(fn, "pid") == 0)
				snprintf(e->s[f], STRMAX, "<0.%u.0>", 80 + i);
			else if (strcmp(fn, "info") == 0 && i % 3 == 0)
				e->s[f][0] = 0; /* empty string */
			else
				snprintf(e->s[f], STRMAX, "%s_%u_%u", fn, id, i);
			break;
		}
	}
}

/* Little-endian encoders, written independently of bp_format.h's. */
static void le(uint8_t *p, uint64_t v, int n)
{
	for (int k = 0; k < n; k++)
		p[k] = (uint8_t)(v >> (8 * k));
}

static uint64_t rd_le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int k = n - 1; k >= 0; k--)
		v = v << 8 | p[k];
	return v;
}

/* Encodes e: the 18-byte header (through bp_ev_header), then the fields. */
static void encode(struct tev *e)
{
	const struct cls *c = &classes[e->id];
	uint8_t *p = e->enc;
	size_t off = bp_ev_header(p, (uint16_t)e->id, e->ts, e->pid);

	check_u(off, 18);
	check_u(rd_le(p, 2), e->id);
	check_u(rd_le(p + 2, 8), e->ts);
	check_u(rd_le(p + 10, 8), e->pid);
	for (unsigned f = 0; c->types[f]; f++) {
		switch (c->types[f]) {
		case 'b':
			p[off++] = (uint8_t)e->u[f];
			break;
		case 'w':
			le(p + off, e->u[f], 4);
			off += 4;
			break;
		case 'q':
			le(p + off, e->u[f], 8);
			off += 8;
			break;
		case 's':
			memcpy(p + off, e->s[f], strlen(e->s[f]) + 1);
			off += strlen(e->s[f]) + 1;
			break;
		}
	}
	e->len = (uint32_t)off;
}

/* Decodes one event at p (n bytes left) and compares it with e.  Returns
 * the event's length, 0 if it cannot be decoded. */
static __attribute__((unused)) uint32_t
decode_check(const uint8_t *p, size_t n, const struct tev *e)
{
	size_t off = 18;

	if (n < 18)
		return 0;
	unsigned id = (unsigned)rd_le(p, 2);
	check_u(id, e->id);
	if (id >= NCLASSES)
		return 0;
	check_u(rd_le(p + 2, 8), e->ts_out);
	check_u(rd_le(p + 10, 8), e->pid);
	for (unsigned f = 0; classes[id].types[f]; f++) {
		size_t w = 0;
		switch (classes[id].types[f]) {
		case 'b':
			w = 1;
			break;
		case 'w':
			w = 4;
			break;
		case 'q':
			w = 8;
			break;
		case 's': {
			const uint8_t *z = memchr(p + off, 0, n - off);
			if (!z)
				return 0;
			check(strcmp((const char *)p + off, e->s[f]) == 0);
			off = (size_t)(z - p) + 1;
			continue;
		}
		}
		if (off + w > n)
			return 0;
		check_u(rd_le(p + off, (int)w), e->u[f]);
		off += w;
	}
	return (uint32_t)off;
}

#endif /* BP_TEST_CTF_EVENTS_H */
