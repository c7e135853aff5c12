/* cmd_info.c -- `beamprobe info DIR`: node, OTP release, wall-clock time
 * span, events by kind, events lost by cause, files and their sizes.
 */
#include "bp_cli.h"
#include "bp_hash.h"
#include "bp_out.h"

#include <getopt.h>
#include <string.h>

static void field(struct bp_out *o, const char *key, const char *val)
{
	bp_out_pad(o, key, 14, 0);
	bp_out_str(o, val ? val : "-");
	bp_out_char(o, '\n');
}

static void count_line(struct bp_out *o, const char *name, uint64_t n)
{
	bp_out_str(o, "  ");
	bp_out_pad(o, name, 30, 0);
	bp_out_u64_w(o, n, 12);
	bp_out_char(o, '\n');
}

static void print_losses(struct bp_out *o, const struct bp_reader *r)
{
	struct bp_loss_report l;

	bp_reader_loss_report(r, &l);
	bp_out_str(o, "lost events:  ");
	bp_out_u64(o, l.total);
	if (!l.any_drops && r->nstreams && l.missing)
		bp_out_str(o, " (no drops event: it was in what is missing)");
	else if (!l.any_drops && r->nstreams && !l.recorded)
		bp_out_str(o, " (no drops event: trace not stopped "
			      "cleanly?)");
	bp_out_char(o, '\n');
	for (int c = 0; c < BP_DROP_COUNT; c++)
		if (l.by_cause[c])
			count_line(o, bp_drop_cause_names[c], l.by_cause[c]);
	for (int c = 0; c < BP_SL_COUNT; c++)
		if (l.more[c])
			count_line(o, bp_session_loss_names[c], l.more[c]);
	if (l.other)
		count_line(o, "other causes", l.other);
	if (l.unattributed)
		count_line(o, "unattributed", l.unattributed);
	if (l.missing)
		count_line(o, "missing from the files", l.missing);
	if (l.discarded)
		count_line(o, "(events_discarded, headers)", l.discarded);
	if (l.no_stream)
		count_line(o, "(in no stream file)", l.no_stream);
	if (l.stream_only)
		count_line(o, "(tcp stream only)", l.stream_only);
}

int bp_cmd_info(int argc, char **argv)
{
	static const struct option opts[] = {{"help", no_argument, 0, 'h'},
					     {0, 0, 0, 0}};
	uint64_t by_kind[BP_EV_COUNT + 1] = {0}, total = 0, last = 0;
	struct bp_reader r;
	struct bp_map procs; /* distinct process keys */
	struct bp_out o;
	const struct bp_event *e;
	int c, err;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h')
			return bp_cli_help("info");
		return bp_cli_usage("info", "bad option");
	}
	if (optind != argc - 1)
		return bp_cli_usage("info", "expected one trace directory");
	if (bp_cli_open(&r, argv[optind], 0) != 0)
		return BP_EXIT_DAMAGED;
	bp_map_init(&procs);
	while ((e = bp_reader_next(&r))) {
		by_kind[e->id < BP_EV_COUNT ? e->id : BP_EV_COUNT]++;
		if (e->id == BP_EV_PROCESS)
			bp_map_put(&procs, e->pid, 1);
		if (e->id != BP_EV_PROCESS && e->id != BP_EV_DROPS) {
			total++;
			last = e->ts;
		}
	}
	if ((err = bp_out_open(&o, NULL)) != 0) {
		bp_map_free(&procs);
		bp_reader_close(&r);
		return bp_cli_finish(&r, err, "standard output", 0);
	}
	const struct bp_meta *m = &r.meta;
	char uuid[37] = "-";
	if (m->has_uuid)
		bp_format_uuid(m->uuid, uuid);
	field(&o, "trace:", r.dir);
	field(&o, "node:", bp_meta_env(m, "node"));
	field(&o, "otp release:", bp_meta_env(m, "otp_release"));
	field(&o, "hostname:", bp_meta_env(m, "hostname"));
	field(&o, "uuid:", uuid);
	bp_out_pad(&o, "format:", 14, 0);
	if (m->major >= 0) {
		bp_out_i64(&o, m->major);
		bp_out_char(&o, '.');
		bp_out_i64(&o, m->minor);
	} else {
		bp_out_str(&o, "-");
	}
	bp_out_char(&o, '\n');
	for (unsigned i = 0; i < m->nenv; i++) { /* other env keys */
		static const char *const shown[] = {
			"node", "otp_release", "hostname", "domain",
			"tracer_name", "beamprobe_format_major",
			"beamprobe_format_minor", "stream_files",
			BP_ENV_SESSION_LOST};
		int skip = 0;
		for (size_t k = 0; k < sizeof shown / sizeof *shown; k++)
			skip |= !strcmp(m->env_key[i], shown[k]);
		if (skip)
			continue;
		bp_out_str(&o, m->env_key[i]);
		bp_out_char(&o, ':');
		bp_out_spaces(&o, strlen(m->env_key[i]) < 13
					  ? 13 - strlen(m->env_key[i])
					  : 1);
		bp_out_text(&o, m->env_val[i], strlen(m->env_val[i]));
		bp_out_char(&o, '\n');
	}
	if (total) {
		bp_out_str(&o, "start:        ");
		bp_out_datetime(&o, bp_reader_wall(&r, r.start_ts));
		bp_out_str(&o, "\nend:          ");
		bp_out_datetime(&o, bp_reader_wall(&r, last));
		bp_out_str(&o, "\nduration:     ");
		bp_out_dur(&o, last - r.start_ts);
		bp_out_char(&o, '\n');
	}
	bp_out_str(&o, "events:       ");
	bp_out_u64(&o, total);
	bp_out_char(&o, '\n');
	for (unsigned id = 0; id <= BP_EV_COUNT; id++)
		if (by_kind[id] && id != BP_EV_PROCESS && id != BP_EV_DROPS)
			count_line(&o, bp_event_name((uint16_t)id),
				   by_kind[id]);
	bp_out_str(&o, "processes:    ");
	bp_out_u64(&o, procs.n);
	bp_out_str(&o, " (processes and ports described)\n");
	bp_map_free(&procs);
	print_losses(&o, &r);
	bp_out_str(&o, "files:\n");
	bp_out_str(&o, "  ");
	bp_out_pad(&o, "metadata", 16, 0);
	bp_out_u64_w(&o, r.metadata_size, 12);
	bp_out_str(&o, r.meta_missing ? " bytes (missing)\n" : " bytes\n");
	for (uint32_t i = 0; i < r.nstreams; i++) {
		const struct bp_stream *s = r.streams[i];
		const char *base = strrchr(s->path, '/');
		bp_out_str(&o, "  ");
		bp_out_pad(&o, base ? base + 1 : s->path, 16, 0);
		bp_out_u64_w(&o, s->size, 12);
		bp_out_str(&o, " bytes ");
		bp_out_u64_w(&o, s->packets, 8);
		bp_out_str(&o, " packets ");
		bp_out_u64_w(&o, s->events, 10);
		bp_out_str(&o, " events");
		if (s->state == BP_STREAM_DEAD) {
			bp_out_str(&o, "  DAMAGED, ");
			bp_out_u64(&o, s->damaged_bytes);
			bp_out_str(&o, " bytes unread");
		} else if (s->damaged_bytes) {
			bp_out_str(&o, "  ");
			bp_out_u64(&o, s->damaged_bytes);
			bp_out_str(&o, " bytes skipped");
		}
		bp_out_char(&o, '\n');
	}
	err = bp_out_close(&o);
	int rc = bp_cli_finish(&r, err, "standard output", BP_EXIT_OK);
	bp_reader_close(&r);
	return rc;
}
