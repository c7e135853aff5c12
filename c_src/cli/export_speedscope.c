/* export_speedscope.c -- `export --format speedscope`: one evented
 * profile per Erlang process that made traced calls, in the file format
 * of https://www.speedscope.app/file-format-schema.json (frames shared,
 * "O"/"C" events at ns offsets from the first event, balanced).
 *
 * The events of a profile must be contiguous in the output while the
 * trace interleaves processes, so open/close records are spilled to an
 * anonymous temporary file in per-process blocks of BLOCK records; each
 * process keeps one block in memory and the offsets of its spilled
 * blocks.  Memory: one block per process plus 8 bytes per spilled block.
 */
#include "bp_export.h"
#include "bp_cli.h"
#include "bp_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 64

struct rec {
	uint64_t at;          /* ns from the first event */
	uint32_t frame;       /* function id */
	uint32_t open;        /* 1: "O", 0: "C" */
};

struct track {
	struct rec buf[BLOCK];
	uint32_t n;
	uint64_t *blocks;     /* offsets in the spill file; owned */
	uint32_t nblocks, capblocks;
	uint64_t records;
	uint64_t last_at;     /* `at` of the latest record: the endValue */
};

struct ss {
	struct bp_model m;
	struct track **tracks; /* by process index; owned */
	uint32_t ntracks;
	FILE *spill;
	uint64_t spill_off;
	uint64_t start;
	int failed;           /* ENOMEM or an I/O errno */
};

static struct track *track_of(struct ss *s, const struct bp_proc *p)
{
	if (p->index >= s->ntracks) {
		uint32_t n = s->ntracks ? s->ntracks : 64;
		while (n <= p->index)
			n *= 2;
		struct track **v = realloc(s->tracks, n * sizeof *v);
		if (!v)
			return NULL;
		memset(v + s->ntracks, 0, (n - s->ntracks) * sizeof *v);
		s->tracks = v;
		s->ntracks = n;
	}
	if (!s->tracks[p->index])
		s->tracks[p->index] = calloc(1, sizeof(struct track));
	return s->tracks[p->index];
}

static void spill(struct ss *s, struct track *t)
{
	if (t->nblocks == t->capblocks) {
		uint32_t cap = t->capblocks ? t->capblocks * 2 : 8;
		uint64_t *v = realloc(t->blocks, cap * sizeof *v);
		if (!v) {
			s->failed = ENOMEM;
			return;
		}
		t->blocks = v;
		t->capblocks = cap;
	}
	if (fwrite(t->buf, sizeof t->buf, 1, s->spill) != 1) {
		s->failed = errno ? errno : EIO;
		return;
	}
	t->blocks[t->nblocks++] = s->spill_off;
	s->spill_off += sizeof t->buf;
	t->n = 0;
}

static void record(struct ss *s, const struct bp_proc *p, uint64_t ts,
		   uint32_t func, int open)
{
	struct track *t = track_of(s, p);

	if (!t) {
		s->failed = ENOMEM;
		return;
	}
	if (t->n == BLOCK)
		spill(s, t);
	if (t->n == BLOCK) /* spill failed */
		return;
	t->buf[t->n++] = (struct rec){ts - s->start, func, (uint32_t)open};
	t->records++;
	t->last_at = ts - s->start;
}

static void on_end(void *ctx, const struct bp_frame_end *fe)
{
	record(ctx, fe->proc, fe->end, fe->frame->func, 0);
}

static void write_rec(struct bp_out *o, const struct rec *r, int first)
{
	bp_out_str(o, first ? "{\"type\":\"" : ",{\"type\":\"");
	bp_out_char(o, r->open ? 'O' : 'C');
	bp_out_str(o, "\",\"frame\":");
	bp_out_u64(o, r->frame);
	bp_out_str(o, ",\"at\":");
	bp_out_u64(o, r->at);
	bp_out_char(o, '}');
}

/* One evented profile; it ends at its last event (not the trace's). */
static void write_profile(struct ss *s, struct bp_out *o,
			  const struct bp_proc *p, const struct track *t,
			  int first)
{
	struct rec block[BLOCK];
	int first_rec = 1;

	bp_out_str(o, first ? "\n{\"type\":\"evented\",\"name\":"
			    : ",\n{\"type\":\"evented\",\"name\":");
	bp_export_json_proc_label(o, p);
	bp_out_str(o, ",\"unit\":\"nanoseconds\",\"startValue\":0,"
		      "\"endValue\":");
	bp_out_u64(o, t->last_at);
	bp_out_str(o, ",\"events\":[");
	for (uint32_t b = 0; b < t->nblocks && !s->failed; b++) {
		if (fseeko(s->spill, (off_t)t->blocks[b], SEEK_SET) != 0 ||
		    fread(block, sizeof block, 1, s->spill) != 1) {
			s->failed = errno ? errno : EIO;
			break;
		}
		for (uint32_t i = 0; i < BLOCK; i++, first_rec = 0)
			write_rec(o, &block[i], first_rec);
	}
	for (uint32_t i = 0; i < t->n; i++, first_rec = 0)
		write_rec(o, &t->buf[i], first_rec);
	bp_out_str(o, "]}");
}

int bp_export_speedscope(struct bp_reader *r, struct bp_out *o)
{
	struct ss s;
	const struct bp_event *e;

	memset(&s, 0, sizeof s);
	s.start = r->start_ts == UINT64_MAX ? 0 : r->start_ts;
	s.spill = tmpfile();
	if (!s.spill) {
		bp_cli_error("temporary file: %s", strerror(errno));
		return -1;
	}
	bp_model_init(&s.m, on_end, &s);
	bp_model_read_env(&s.m, &r->meta);
	while ((e = bp_reader_next(r)) && !s.failed) {
		struct bp_proc *p = e->pid ? bp_model_proc(&s.m, e->pid) : NULL;
		uint32_t depth = p ? p->depth : 0;
		bp_model_apply_to(&s.m, p, e);
		if (e->id == BP_EV_CALL && p && p->depth > depth)
			record(&s, p, e->ts, p->stack[p->depth - 1].func, 1);
	}
	bp_model_finish(&s.m); /* open calls end at the trace's end */

	bp_out_str(o, "{\"$schema\":\"https://www.speedscope.app/"
		      "file-format-schema.json\",\"exporter\":\"beamprobe "
		      BP_VERSION "\",\"name\":");
	bp_out_json_str(o, r->dir, strlen(r->dir));
	bp_out_str(o, ",\"activeProfileIndex\":0,\"shared\":{\"frames\":[");
	for (uint32_t f = 0; f < s.m.funcs.n; f++) {
		const struct bp_str *fs = bp_strtab_get(&s.m.funcs, f);
		bp_out_str(o, f ? ",{\"name\":" : "{\"name\":");
		bp_out_json_str(o, fs->s, fs->len);
		bp_out_char(o, '}');
	}
	bp_out_str(o, "]},\"profiles\":[");
	if (fflush(s.spill) != 0 && !s.failed)
		s.failed = errno;
	int first = 1;
	for (uint32_t i = 0; i < s.m.nprocs; i++) {
		const struct bp_proc *p = s.m.procs[i];
		const struct track *t = p->index < s.ntracks
						? s.tracks[p->index]
						: NULL;
		if (!t || !t->records)
			continue;
		write_profile(&s, o, p, t, first);
		first = 0;
	}
	bp_out_str(o, "\n]}\n");
	for (uint32_t i = 0; i < s.ntracks; i++) {
		if (s.tracks[i])
			free(s.tracks[i]->blocks);
		free(s.tracks[i]);
	}
	free(s.tracks);
	fclose(s.spill);
	int failed = s.failed || s.m.oom;
	if (failed)
		bp_cli_error("speedscope export incomplete: %s",
			     strerror(s.failed ? s.failed : ENOMEM));
	bp_model_free(&s.m);
	return failed ? -1 : 0;
}
