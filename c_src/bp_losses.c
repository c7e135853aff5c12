/* bp_losses.c -- a session's losses, each event counted once
 * (bp_losses.h). */
#include "bp_losses.h"
#include "bp_follow.h"
#include "bp_session.h"
#include "bp_sink_tcp.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

/* A follow session's request budget (losses of every sink). */
static uint64_t follow_losses(struct bp_session *s, uint64_t sl[BP_SL_COUNT],
			      int has[BP_SL_COUNT])
{
	if (!s->follow)
		return 0;
	sl[BP_SL_REQUEST_EVENTS] = bp_follow_count(s->follow, BP_FC_EVENTS);
	sl[BP_SL_REQUEST_MS] = bp_follow_count(s->follow, BP_FC_MS);
	sl[BP_SL_REQUEST_TABLE] = bp_follow_count(s->follow, BP_FC_TABLE);
	has[BP_SL_REQUEST_EVENTS] = has[BP_SL_REQUEST_MS] =
		has[BP_SL_REQUEST_TABLE] = 1;
	return sl[BP_SL_REQUEST_EVENTS] + sl[BP_SL_REQUEST_MS] +
	       sl[BP_SL_REQUEST_TABLE];
}

void bp_losses_get(struct bp_session *s, struct bp_losses *l)
{
	uint64_t src[BP_DROP_COUNT], nsrc = 0, nd = 0, req;

	*l = (struct bp_losses){0};
	bp_session_drops(s, l->d);
	for (int c = 0; c < BP_DROP_COUNT; c++)
		nd += l->d[c];
	req = follow_losses(s, l->sl, l->has);
	l->has_file = s->has_file;
	l->file = nd + req;
	l->total = l->file;
	if (s->tcp) {
		struct bp_tcp_counts tc;
		bp_tcp_counts(s->tcp, &tc);
		bp_session_source_drops(s, src);
		for (int c = 0; c < BP_DROP_COUNT; c++)
			nsrc += src[c];
		l->has_tcp = 1;
		l->tcp_all = tc.events_dropped;
		l->tcp = nsrc + req + tc.events_dropped;
		/* Of the stream's losses, those the files lack too are
		 * counted by the files' cause already. */
		l->sl[BP_SL_STREAM] = tc.events_dropped - tc.events_both;
		l->has[BP_SL_STREAM] = 1;
		l->total += l->sl[BP_SL_STREAM];
	}
}

static int put(char *v, size_t cap, size_t *n, const char *name,
	       uint64_t x)
{
	int w = snprintf(v + *n, cap - *n, "%s%s=%" PRIu64, *n ? "," : "",
			 name, x);

	if (w < 0 || (size_t)w >= cap - *n)
		return ENOSPC;
	*n += (size_t)w;
	return 0;
}

int bp_losses_file_text(const struct bp_losses *l, char *v, size_t cap)
{
	size_t n = 0;
	int err = 0;

	if (cap)
		v[0] = '\0';
	for (int c = 0; c < BP_DROP_COUNT && !err; c++)
		err = put(v, cap, &n, bp_drop_cause_names[c], l->d[c]);
	for (int c = 0; c < BP_SL_COUNT && !err; c++)
		if (l->has[c])
			err = put(v, cap, &n, bp_session_loss_names[c],
				  l->sl[c]);
	return err;
}

int bp_losses_stream_text(struct bp_session *s, char *v, size_t cap)
{
	uint64_t d[BP_DROP_COUNT], sl[BP_SL_COUNT];
	int has[BP_SL_COUNT] = {0}, err = 0;
	struct bp_tcp_counts tc;
	size_t n = 0;

	if (cap)
		v[0] = '\0';
	bp_session_source_drops(s, d);
	bp_tcp_counts(s->tcp, &tc);
	d[BP_DROP_IO_ERROR] += tc.events_dropped;
	(void)follow_losses(s, sl, has);
	for (int c = 0; c < BP_DROP_COUNT && !err; c++)
		err = put(v, cap, &n, bp_drop_cause_names[c], d[c]);
	for (int c = 0; c < BP_SL_COUNT && !err; c++)
		if (has[c])
			err = put(v, cap, &n, bp_session_loss_names[c], sl[c]);
	return err;
}
