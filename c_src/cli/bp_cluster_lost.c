/* bp_cluster_lost.c -- `beamprobe cluster': the events each node's trace
 * lost, and all of them, cause by cause, as `stats' tells them of one
 * trace (bp_reader_loss_report: the streams' drops events, the stop
 * record, the files missing; a TCP stream's own losses of events the
 * files hold named apart and out of the total).
 */
#include <string.h>

#include "bp_cluster.h"
#include "bp_out.h"

/* The causes of a loss report, in the order `stats' names them; the
 * stream's own (tcp_stream_only) last, out of the total. */
enum { NCAUSES = BP_DROP_COUNT + BP_SL_COUNT + 3 };

static const char *cause_name(int k)
{
	if (k < BP_DROP_COUNT)
		return bp_drop_cause_names[k];
	if (k < BP_DROP_COUNT + BP_SL_COUNT)
		return k - BP_DROP_COUNT == BP_SL_STREAM
			       ? "tcp_stream_only"
			       : bp_session_loss_names[k - BP_DROP_COUNT];
	return k == BP_DROP_COUNT + BP_SL_COUNT	    ? "other_causes"
	       : k == BP_DROP_COUNT + BP_SL_COUNT + 1 ? "unattributed"
						      : "missing_from_files";
}

static void causes(const struct bp_loss_report *l, uint64_t v[NCAUSES])
{
	for (int c = 0; c < BP_DROP_COUNT; c++)
		v[c] = l->by_cause[c];
	for (int c = 0; c < BP_SL_COUNT; c++)
		v[BP_DROP_COUNT + c] =
			c == BP_SL_STREAM ? l->stream_only : l->more[c];
	v[BP_DROP_COUNT + BP_SL_COUNT] = l->other;
	v[BP_DROP_COUNT + BP_SL_COUNT + 1] = l->unattributed;
	v[BP_DROP_COUNT + BP_SL_COUNT + 2] = l->missing;
}

static int is_stream_only(int k)
{
	return k == BP_DROP_COUNT + BP_SL_STREAM;
}

static void text_causes(struct bp_out *o, const uint64_t v[NCAUSES])
{
	for (int k = 0; k < NCAUSES; k++) {
		if (!v[k])
			continue;
		bp_out_str(o, is_stream_only(k) ? "  (" : "  ");
		bp_out_str(o, cause_name(k));
		bp_out_char(o, '=');
		bp_out_u64(o, v[k]);
		if (is_stream_only(k))
			bp_out_char(o, ')');
	}
}

static void json_causes(struct bp_out *o, uint64_t total,
			const uint64_t v[NCAUSES])
{
	bp_out_str(o, "\"total\": ");
	bp_out_u64(o, total);
	bp_out_str(o, ", \"by_cause\": {");
	for (int k = 0; k < NCAUSES; k++) {
		bp_out_str(o, k ? ", \"" : "\"");
		bp_out_str(o, cause_name(k));
		bp_out_str(o, "\": ");
		bp_out_u64(o, v[k]);
	}
	bp_out_char(o, '}');
}

/* The cluster's losses: the nodes' summed, cause by cause. */
static uint64_t sum_all(const struct bp_cluster *c, uint64_t all[NCAUSES])
{
	uint64_t total = 0;

	memset(all, 0, NCAUSES * sizeof *all);
	for (unsigned i = 0; i < c->n; i++) {
		uint64_t v[NCAUSES];
		causes(&c->nodes[i].loss, v);
		for (int k = 0; k < NCAUSES; k++)
			all[k] += v[k];
		total += c->nodes[i].loss.total;
	}
	return total;
}

void bp_cluster_lost_text(const struct bp_cluster *c, struct bp_out *o)
{
	uint64_t all[NCAUSES], total = sum_all(c, all);

	bp_out_str(o, "Lost events: ");
	bp_out_u64(o, total);
	bp_out_str(o, " in all");
	text_causes(o, all);
	bp_out_char(o, '\n');
	for (unsigned i = 0; i < c->n; i++) {
		const struct bp_cnode *nd = &c->nodes[i];
		uint64_t v[NCAUSES];

		causes(&nd->loss, v);
		bp_out_str(o, "  ");
		bp_out_pad(o, nd->name, 32, 0);
		bp_out_str(o, " lost ");
		bp_out_u64(o, nd->loss.total);
		text_causes(o, v);
		bp_out_char(o, '\n');
	}
}

void bp_cluster_lost_json(const struct bp_cluster *c, struct bp_out *o)
{
	uint64_t all[NCAUSES], total = sum_all(c, all);

	bp_out_str(o, ",\n \"lost\": {");
	json_causes(o, total, all);
	bp_out_str(o, ", \"nodes\": [");
	for (unsigned i = 0; i < c->n; i++) {
		const struct bp_cnode *nd = &c->nodes[i];
		uint64_t v[NCAUSES];

		causes(&nd->loss, v);
		bp_out_str(o, i ? ",\n  {\"node\": " : "\n  {\"node\": ");
		bp_out_json_str(o, nd->name, strlen(nd->name));
		bp_out_str(o, ", ");
		json_causes(o, nd->loss.total, v);
		bp_out_char(o, '}');
	}
	bp_out_str(o, "]}");
}
