/* bp_nif_config.c -- start/1: a session made from its config map.
 *
 * Every key of the config (validated first by beamprobe_config.erl) is
 * checked again here: the sinks (file, tcp, lttng, usdt, handlers), the
 * limits (buffer, slots, events, bytes, rate, max_sessions), the capture
 * limits, overflow and args modes.  A malformed key gives
 * {error, {bad_config, Key}}; the session resource, its mapping, streams
 * and collector thread are made last.  The resource, its destructor and
 * the session count: bp_nif.c.
 */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bp_atoms.h"
#include "bp_budget.h"
#include "bp_clock.h"
#include "bp_dio.h"
#include "bp_follow.h"
#include "bp_nif.h"
#include "bp_output.h"
#include "bp_restype.h"
#include "bp_session.h"
#include "bp_sink_handler.h"
#include "bp_sink_lttng.h"
#include "bp_sink_tcp.h"
#include "bp_term.h"
#include "bp_tracer.h"

#define DEFAULT_PACKET (64 * 1024)
#define DEFAULT_MAX_SESSIONS 64
#define MIN_BUFFER (16 * 1024)
#define MAX_BUFFER (1ull << 32)

static int get_u64_opt(ErlNifEnv *env, ERL_NIF_TERM map, ERL_NIF_TERM key,
		       ErlNifUInt64 def, ErlNifUInt64 *out)
{
	ERL_NIF_TERM v;

	if (!enif_get_map_value(env, map, key, &v)) {
		*out = def;
		return 1;
	}
	return enif_get_uint64(env, v, out);
}

static int get_bool_opt(ErlNifEnv *env, ERL_NIF_TERM map, ERL_NIF_TERM key,
			int def, int *out)
{
	ERL_NIF_TERM v;

	if (!enif_get_map_value(env, map, key, &v)) {
		*out = def;
		return 1;
	}
	if (v == bp_atom.true_ || v == bp_atom.false_) {
		*out = v == bp_atom.true_;
		return 1;
	}
	return 0;
}

int bp_nif_get_capture(ErlNifEnv *env, ERL_NIF_TERM cfg,
		       struct bp_capture *c)
{
	ERL_NIF_TERM m;
	ErlNifUInt64 d, l, b, n;

	c->depth = BP_CAPTURE_DEFAULT_DEPTH;
	c->list = BP_CAPTURE_DEFAULT_LIST;
	c->binary = BP_CAPTURE_DEFAULT_BINARY;
	c->bytes = BP_CAPTURE_DEFAULT_BYTES;
	if (!enif_get_map_value(env, cfg, bp_atom.capture, &m))
		return 1;
	if (!enif_is_map(env, m) ||
	    !get_u64_opt(env, m, bp_atom.depth, c->depth, &d) ||
	    !get_u64_opt(env, m, bp_atom.list, c->list, &l) ||
	    !get_u64_opt(env, m, bp_atom.binary, c->binary, &b) ||
	    !get_u64_opt(env, m, bp_atom.bytes, c->bytes, &n))
		return 0;
	if (d < 1 || d > 64 || l < 1 || l > 4096 || b > 65536 || n < 16 ||
	    n > 65536)
		return 0;
	c->depth = (unsigned)d;
	c->list = (unsigned)l;
	c->binary = (unsigned)b;
	c->bytes = (unsigned)n;
	return 1;
}

/* handlers => [#{pid, kinds, pids, batch, credits, overflow}] */
static int get_handlers(ErlNifEnv *env, ERL_NIF_TERM cfg, struct bp_session *s)
{
	ERL_NIF_TERM list, head, v;
	unsigned n;

	if (!enif_get_map_value(env, cfg, bp_atom.handlers, &list))
		return 1;
	if (!enif_get_list_length(env, list, &n) || n > 16)
		return 0;
	if (n == 0)
		return 1;
	s->handlers = enif_alloc(sizeof *s->handlers * n);
	if (!s->handlers)
		return 0;
	memset(s->handlers, 0, sizeof *s->handlers * n);
	for (unsigned i = 0; enif_get_list_cell(env, list, &head, &list); i++) {
		struct bp_handler_sink *h = &s->handlers[i];
		ErlNifUInt64 kinds, batch, credits;
		ERL_NIF_TERM pl, ph;
		if (bp_handler_init(h) != 0)
			return 0;
		s->nhandlers = i + 1;
		h->index = i;
		if (!enif_is_map(env, head) ||
		    !enif_get_map_value(env, head, bp_atom.pid, &v) ||
		    !enif_get_local_pid(env, v, &h->pid) ||
		    !get_u64_opt(env, head, bp_atom.kinds, ~0ull, &kinds) ||
		    !get_u64_opt(env, head, bp_atom.batch, 1000, &batch) ||
		    !get_u64_opt(env, head, bp_atom.credits, 4, &credits) ||
		    batch < 1 || batch > 100000 || credits < 1 ||
		    credits > BP_HANDLER_MAX_CREDITS)
			return 0;
		h->kinds = kinds;
		h->batch_max = (uint32_t)batch;
		h->credits_max = (uint32_t)credits;
		if (enif_get_map_value(env, head, bp_atom.overflow, &v))
			h->overflow_stop = v == bp_atom.stop;
		if (enif_get_map_value(env, head, bp_atom.pids, &pl)) {
			while (enif_get_list_cell(env, pl, &ph, &pl)) {
				if (h->npids >= BP_HANDLER_MAX_PIDS ||
				    !(enif_is_pid(env, ph) || enif_is_port(env, ph)))
					return 0;
				h->pids[h->npids++] = (uint64_t)ph;
			}
		}
	}
	return 1;
}

static int64_t realtime_offset_ns(void)
{
	struct timespec rt;

	clock_gettime(CLOCK_REALTIME, &rt);
	uint64_t mono = bp_now();
	return (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec - (int64_t)mono;
}

/* start(Config :: map()) -> {ok, Session} | {error, {What, Why}}
 * Config keys (validated by beamprobe_config.erl): dir, buffer, max_slots,
 * overflow, args, capture, return, exceptions, ms_result, event_limit,
 * byte_limit, notify, env, packet_size, follow.  Creates DIR/metadata; stream files appear as
 * threads produce events. */
/* The largest event a session can write, from its capture limits (see
 * the reservations in bp_tracer.c: header, a pid key, two MFA texts of at
 * most BP_MFA_MAX bytes, three rendered terms; a process event from
 * annotate/2 is at most 18 + 64 + 1023 + BP_MFA_MAX).  The packet must
 * hold it. */
static size_t max_event_size(const struct bp_capture *c)
{
	return BP_EVENT_HEADER_SIZE + 8 + 2 * BP_MFA_MAX +
	       3 * ((size_t)c->bytes + 1) + 64;
}

/* tcp => {Address :: <<_:32>> | <<_:128>>, Port}, tcp_kinds, tcp_queue:
 * the TCP stream sink (bp_sink_tcp.c); the Erlang side has checked that
 * the address is a loopback one unless told otherwise.  1 if absent or
 * well-formed (s->tcp made), 0 if malformed or out of memory. */
static int get_tcp(ErlNifEnv *env, ERL_NIF_TERM cfg, struct bp_session *s)
{
	ERL_NIF_TERM v;
	const ERL_NIF_TERM *t;
	int ar;
	unsigned port;
	ErlNifBinary a;
	ErlNifUInt64 q, kinds;
	struct sockaddr_storage ss;
	socklen_t sl;

	if (!enif_get_map_value(env, cfg, enif_make_atom(env, "tcp"), &v))
		return 1;
	if (!enif_get_tuple(env, v, &ar, &t) || ar != 2 ||
	    !enif_inspect_binary(env, t[0], &a) ||
	    !enif_get_uint(env, t[1], &port) || port < 1 || port > 65535)
		return 0;
	memset(&ss, 0, sizeof ss);
	if (a.size == 4) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		memcpy(&in->sin_addr, a.data, 4);
		sl = sizeof *in;
	} else if (a.size == 16) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		memcpy(&in6->sin6_addr, a.data, 16);
		sl = sizeof *in6;
	} else {
		return 0;
	}
	if (!get_u64_opt(env, cfg, enif_make_atom(env, "tcp_queue"), 8u << 20,
			 &q) || q > (1ull << 31) ||
	    !get_u64_opt(env, cfg, enif_make_atom(env, "tcp_kinds"), ~0ull,
			 &kinds))
		return 0;
	s->tcp_kinds = kinds;
	s->tcp = bp_tcp_new(s, &ss, sl, q, s->max_slots, s->packet_size);
	if (!s->tcp)
		return 0;
	if (enif_get_map_value(env, cfg, enif_make_atom(env, "tcp_token"),
			       &v) &&
	    (!enif_inspect_binary(env, v, &a) ||
	     bp_tcp_set_token(s->tcp, a.data, a.size) != 0))
		return 0;
	return 1;
}

/* start/1's I/O, in the collector thread (start_env): the LTTng provider
 * loaded, the trace directory opened, the metadata written.  ok, or
 * {error, {What, Why}}. */
static ERL_NIF_TERM start_io(ErlNifEnv *env, struct bp_session *s)
{
	const char *unsafe;
	int err;

	if (s->start_lttng) {
		char why[600];
		if (bp_lttng_load(s->start_lttng, why, sizeof why))
			return enif_make_tuple2(
				env, bp_atom.error,
				enif_make_tuple2(
					env,
					enif_make_atom(env, "lttng_unavailable"),
					enif_make_string(env, why,
							 ERL_NIF_LATIN1)));
		s->has_lttng = 1;
	}
	if (s->has_file) {
		/* Everything is created relative to this fd: a symlink planted
		 * in place of the directory or of a file is never followed. */
		int fd = bp_ctf_open_dir(s->dir);
		if (fd < 0)
			return bp_nif_errno_term(env, "file", -fd);
		enif_mutex_lock(s->mtx); /* close_dir (bp_nif.c) */
		s->dirfd = fd;
		enif_mutex_unlock(s->mtx);
		if ((unsafe = bp_output_dir_unsafe(s->dirfd)))
			return bp_nif_error2(env, "file", unsafe);
	}
	bp_clock_reanchor();
	err = s->has_file || s->tcp
		      ? bp_output_write_metadata(env, s, s->start_envlist,
						 realtime_offset_ns())
		      : 0;
	if (err == EINVAL)
		return bp_nif_error2(env, "bad_config", "env");
	if (err)
		return bp_nif_errno_term(env, "file", err);
	return bp_atom.ok;
}

/* The collector thread: start/1's I/O (start_io), its result sent to the
 * caller of start/1, then the collector (bp_collector_main) if it went
 * well.  A start that failed gives its place back and ends as a finished
 * collector (stop/1 answers at once). */
static void *session_thread(void *arg)
{
	struct bp_session *s = arg;
	ErlNifEnv *env = s->start_env;
	ERL_NIF_TERM r = start_io(env, s);
	int ok = r == bp_atom.ok;

	/* What start/1 opened is open now (or will not be). */
	bp_budget_fds_give(s->fds_taken);
	s->fds_taken = 0;

	if (!ok) {
		atomic_store(&s->state, BP_S_STOPPED);
		bp_nif_session_release(s);
	}
	enif_send(NULL, &s->start_pid, env,
		  enif_make_tuple3(env, enif_make_atom(env, "beamprobe_started"),
				   s->start_ref, r));
	s->start_env = NULL;
	enif_free_env(env);
	if (s->start_lttng)
		enif_free(s->start_lttng);
	s->start_lttng = NULL;
	if (ok)
		return bp_collector_main(s);
	enif_mutex_lock(s->mtx);
	s->finished = 1;
	bp_session_tell_stopped(s, NULL);
	enif_mutex_unlock(s->mtx);
	return NULL;
}

ERL_NIF_TERM bp_nif_start_session(ErlNifEnv *env, ERL_NIF_TERM cfg,
				  struct bp_session **sp, int *ok)
{
	ERL_NIF_TERM v, res, ref;
	struct bp_session *s;
	ErlNifBinary dir;
	ErlNifUInt64 buffer, slots, evl, byl, pkt, maxs, maxm;
	int ret, exc, msr, file, rstop;
	ErlNifUInt64 fkinds, lkinds;
	ErlNifBinary lp = {0};

	if (!enif_is_map(env, cfg))
		return enif_make_badarg(env);
	if (!get_bool_opt(env, cfg, bp_atom.file, 1, &file))
		return bp_nif_error2(env, "bad_config", "file");
	if (!file) {
		dir.data = (unsigned char *)"";
		dir.size = 0;
	} else if (!enif_get_map_value(env, cfg, bp_atom.dir, &v) ||
		   !enif_inspect_iolist_as_binary(env, v, &dir) ||
		   dir.size == 0 || dir.size >= sizeof s->dir ||
		   memchr(dir.data, 0, dir.size)) {
		return bp_nif_error2(env, "bad_config", "dir");
	}
	if (!get_u64_opt(env, cfg, bp_atom.buffer, 8u << 20, &buffer) ||
	    buffer < MIN_BUFFER || buffer > MAX_BUFFER)
		return bp_nif_error2(env, "bad_config", "buffer");
	if (!get_u64_opt(env, cfg, bp_atom.max_slots, 64, &slots) ||
	    slots < 1 || slots > BP_MAX_SLOTS)
		return bp_nif_error2(env, "bad_config", "max_slots");
	if (!get_u64_opt(env, cfg, bp_atom.event_limit, 0, &evl) ||
	    !get_u64_opt(env, cfg, bp_atom.byte_limit, 0, &byl))
		return bp_nif_error2(env, "bad_config", "limits");
	if (!get_u64_opt(env, cfg, bp_atom.packet_size, DEFAULT_PACKET, &pkt) ||
	    pkt < 4096 || pkt > BP_PACKET_MAX)
		return bp_nif_error2(env, "bad_config", "packet_size");
	if (!get_bool_opt(env, cfg, bp_atom.return_, 1, &ret) ||
	    !get_bool_opt(env, cfg, bp_atom.exceptions, 1, &exc) ||
	    !get_bool_opt(env, cfg, bp_atom.ms_result, 0, &msr))
		return bp_nif_error2(env, "bad_config", "return");

	if (!get_u64_opt(env, cfg, bp_atom.file_kinds, ~0ull, &fkinds))
		return bp_nif_error2(env, "bad_config", "file_kinds");
	if (!get_bool_opt(env, cfg, bp_atom.rate_stop, 0, &rstop))
		return bp_nif_error2(env, "bad_config", "rate_stop");
	if (!get_u64_opt(env, cfg, enif_make_atom(env, "max_sessions"),
			 DEFAULT_MAX_SESSIONS, &maxs) ||
	    maxs < 1 || maxs > 100000)
		return bp_nif_error2(env, "bad_config", "max_sessions");
	if (!get_u64_opt(env, cfg, enif_make_atom(env, "max_memory"),
			 0, &maxm))
		return bp_nif_error2(env, "bad_config", "max_memory");
	if (maxm == 0) /* auto */
		maxm = bp_budget_memory_default();

	/* lttng => Path: the LTTng-UST provider, loaded (once) by the
	 * collector thread before anything else is made (start_io). */
	if (enif_get_map_value(env, cfg, enif_make_atom(env, "lttng"), &v) &&
	    (!enif_inspect_iolist_as_binary(env, v, &lp) || lp.size == 0 ||
	     lp.size >= 4096 || memchr(lp.data, 0, lp.size)))
		return bp_nif_error2(env, "bad_config", "lttng");
	if (!get_u64_opt(env, cfg, enif_make_atom(env, "lttng_kinds"), ~0ull,
			 &lkinds))
		return bp_nif_error2(env, "bad_config", "lttng_kinds");

	s = bp_restype_alloc();
	if (!s)
		return bp_nif_error2(env, "start", "enomem");
	memset(s, 0, sizeof *s);
	s->lttng_kinds = lkinds;
	s->dirfd = -1;
	res = enif_make_resource(env, s);
	enif_release_resource(s); /* the term owns it now */
	*sp = s;
	if (!bp_nif_session_reserve(s, (int)maxs))
		return enif_make_tuple2(
			env, bp_atom.error,
			enif_make_tuple2(env, enif_make_atom(env,
							     "too_many_sessions"),
					 enif_make_uint64(env, maxs)));

	memcpy(s->dir, dir.data, dir.size);
	s->dir[dir.size] = '\0';
	s->has_file = file;
	s->file_kinds = fkinds;
	if (!get_u64_opt(env, cfg, enif_make_atom(env, "usdt_kinds"), 0,
			 &s->usdt_kinds))
		return bp_nif_error2(env, "bad_config", "usdt_kinds");
	s->rate_stop = rstop;
	if (enif_get_map_value(env, cfg, bp_atom.rate, &v)) {
		const ERL_NIF_TERM *rt;
		int ra;
		ErlNifUInt64 rn, rms;
		if (!enif_get_tuple(env, v, &ra, &rt) || ra != 2 ||
		    !enif_get_uint64(env, rt[0], &rn) ||
		    !enif_get_uint64(env, rt[1], &rms) || rn < 1 || rms < 1)
			return bp_nif_error2(env, "bad_config", "rate");
		s->rate_n = rn;
		s->rate_window = rms * 1000000ull;
		atomic_init(&s->rate_start, bp_now());
	}
	/* follow => {Events, Ms, Requests, Label}: a follow session's
	 * per-request budget and its seq_trace label (bp_follow.h). */
	if (enif_get_map_value(env, cfg, enif_make_atom(env, "follow"), &v)) {
		const ERL_NIF_TERM *ft;
		int fa;
		ErlNifUInt64 fe, fms, fr, fl;
		if (!enif_get_tuple(env, v, &fa, &ft) || fa != 4 ||
		    !enif_get_uint64(env, ft[0], &fe) ||
		    !enif_get_uint64(env, ft[1], &fms) ||
		    !enif_get_uint64(env, ft[2], &fr) ||
		    !enif_get_uint64(env, ft[3], &fl) || fe < 1 || fms < 1 ||
		    fr < 1 || fr > BP_FOLLOW_MAX_REQUESTS ||
		    !bp_follow_is_label(fl))
			return bp_nif_error2(env, "bad_config", "follow");
		if (!(s->follow = bp_follow_new(fe, fms, (uint32_t)fr)))
			return bp_nif_error2(env, "start", "enomem");
		s->follow->label = fl;
	}
	if (!get_handlers(env, cfg, s))
		return bp_nif_error2(env, "bad_config", "handlers");
	s->buffer = buffer & ~(uint64_t)4095;
	s->max_slots = (uint32_t)slots;
	s->event_limit = evl;
	s->byte_limit = byl;
	s->packet_size = (size_t)pkt;
	s->flags = (ret ? BP_F_RETURN : 0) | (exc ? BP_F_EXCEPTIONS : 0) |
		   (msr ? BP_F_MS_RESULT : 0);
	s->overflow = BP_OVF_DROP_NEWEST;
	if (enif_get_map_value(env, cfg, bp_atom.overflow, &v)) {
		if (v == bp_atom.drop_oldest)
			s->overflow = BP_OVF_DROP_OLDEST;
		else if (v == bp_atom.stop)
			s->overflow = BP_OVF_STOP;
		else if (v != bp_atom.drop_newest)
			return bp_nif_error2(env, "bad_config", "overflow");
	}
	s->args_mode = BP_ARGS_FULL;
	if (enif_get_map_value(env, cfg, bp_atom.args, &v)) {
		if (v == bp_atom.none)
			s->args_mode = BP_ARGS_NONE;
		else if (v == bp_atom.arity)
			s->args_mode = BP_ARGS_ARITY;
		else if (v != bp_atom.full)
			return bp_nif_error2(env, "bad_config", "args");
	}
	if (!bp_nif_get_capture(env, cfg, &s->capture))
		return bp_nif_error2(env, "bad_config", "capture");
	/* Every event the capture limits allow fits a packet. */
	if (s->packet_size < BP_PACKET_HEADER_SIZE + max_event_size(&s->capture))
		s->packet_size = (BP_PACKET_HEADER_SIZE +
				  max_event_size(&s->capture) + 4095) &
				 ~(size_t)4095;
	if (s->packet_size > BP_PACKET_MAX)
		s->packet_size = BP_PACKET_MAX;
	if (enif_get_map_value(env, cfg, bp_atom.notify, &v)) {
		if (!enif_get_local_pid(env, v, &s->notify))
			return bp_nif_error2(env, "bad_config", "notify");
		s->has_notify = 1;
	}
	atomic_init(&s->state, BP_S_RUNNING);
	atomic_init(&s->stop_reason, BP_SR_NONE);

	s->slot_stride = ((sizeof(struct bp_slot) + 63) & ~(size_t)63) + 4096;
	s->slot_stride = (s->slot_stride & ~(size_t)4095) + s->buffer;
	s->region_size = s->slot_stride * s->max_slots + BP_SESSION_COLORS;
	/* Every slot's ring may become resident: the node-wide budget
	 * (bp_budget.h) must hold them all, else nothing is made. */
	{
		uint64_t per = s->slot_stride, need, used;
		ErlNifUInt64 tq = 0;
		int tcp = enif_get_map_value(env, cfg,
					     enif_make_atom(env, "tcp"), &v);
		/* Each producing thread's stream file has a write buffer
		 * (bp_dio_init: a packet, its padding, the direct-I/O
		 * staging), and its TCP stream a packet buffer. */
		if (s->has_file)
			per += s->packet_size + BP_PACKET_HEADER_SIZE +
			       3 * BP_DIO_ALIGN + BP_DIO_STAGE;
		if (tcp)
			per += s->packet_size;
		need = per * s->max_slots;
		/* A TCP sink's send queue fills under a stalled receiver
		 * (checked again by get_tcp). */
		if (tcp &&
		    get_u64_opt(env, cfg, enif_make_atom(env, "tcp_queue"),
				8u << 20, &tq) &&
		    tq <= (1ull << 31))
			need += tq;
		if (!bp_budget_memory_take(s, need, maxm, &used)) {
			ERL_NIF_TERM k[4] = {enif_make_atom(env, "need"),
					     enif_make_atom(env, "threads"),
					     enif_make_atom(env, "in_use"),
					     enif_make_atom(env, "max")};
			ERL_NIF_TERM v4[4] = {
				enif_make_uint64(env, need),
				enif_make_uint(env, s->max_slots),
				enif_make_uint64(env, used),
				enif_make_uint64(env, maxm)};
			ERL_NIF_TERM m;
			if (!enif_make_map_from_arrays(env, k, v4, 4, &m))
				return enif_make_badarg(env);
			return enif_make_tuple2(
				env, bp_atom.error,
				enif_make_tuple2(
					env,
					enif_make_atom(env, "too_much_memory"),
					m));
		}
	}
	s->map = mmap(NULL, s->region_size, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (s->map == MAP_FAILED) {
		s->map = NULL;
		return bp_nif_error2(env, "start", "enomem");
	}
	s->region = s->map + bp_session_color();
	s->streams = enif_alloc(sizeof *s->streams * s->max_slots);
	if (!s->streams)
		return bp_nif_error2(env, "start", "enomem");
	memset(s->streams, 0, sizeof *s->streams * s->max_slots);
	for (uint32_t i = 0; i < s->max_slots; i++)
		s->streams[i].fd = -1;
	s->prefault_done = enif_alloc(sizeof *s->prefault_done * s->max_slots);
	if (!s->prefault_done)
		return bp_nif_error2(env, "start", "enomem");
	memset(s->prefault_done, 0, sizeof *s->prefault_done * s->max_slots);
	if (!(s->merge = bp_collector_merge_alloc(s->max_slots)))
		return bp_nif_error2(env, "start", "enomem");
	s->mtx = enif_mutex_create("beamprobe_session");
	s->cond = enif_cond_create("beamprobe_session");
	if (!s->mtx || !s->cond)
		return bp_nif_error2(env, "start", "enomem");

	if (!get_tcp(env, cfg, s))
		return bp_nif_error2(env, "bad_config", "tcp");
	bp_output_make_uuid(s->uuid);
	s->lttng_id = bp_lttng_session_id(s->uuid);
	if (!enif_get_map_value(env, cfg, bp_atom.env, &v))
		v = enif_make_list(env, 0);
	if (!(s->start_env = enif_alloc_env()))
		return bp_nif_error2(env, "start", "enomem");
	if (lp.size) {
		if (!(s->start_lttng = enif_alloc(lp.size + 1)))
			return bp_nif_error2(env, "start", "enomem");
		memcpy(s->start_lttng, lp.data, lp.size);
		s->start_lttng[lp.size] = '\0';
	}
	ref = enif_make_ref(env);
	s->start_envlist = enif_make_copy(s->start_env, v);
	s->start_ref = enif_make_copy(s->start_env, ref);
	if (!enif_self(env, &s->start_pid))
		return enif_make_badarg(env);
	/* The directory, the metadata, a socket and a first stream file,
	 * leaving the node its reserve (bp_budget.h); sessions with none
	 * (handlers, LTTng, USDT) need no descriptor. */
	{
		uint64_t nfree, lim;
		uint64_t nfd = (s->has_file ? 3 : 0) + (s->tcp ? 1 : 0);
		if (nfd && !bp_budget_fds_take(nfd, &nfree, &lim))
			return enif_make_tuple2(
				env, bp_atom.error,
				enif_make_tuple4(
					env, enif_make_atom(env, "too_many_files"),
					enif_make_uint64(env, nfree),
					enif_make_uint64(env,
							 bp_budget_fd_reserve(lim)),
					enif_make_uint64(env, lim)));
		s->fds_taken = nfd;
	}
	if (enif_thread_create("beamprobe_collector", &s->tid, session_thread,
			       s, NULL) != 0) {
		bp_budget_fds_give(s->fds_taken);
		s->fds_taken = 0;
		return bp_nif_error2(env, "start", "thread");
	}
	s->thread_started = 1;
	*ok = 1;
	return enif_make_tuple3(env, bp_atom.ok, res, ref);
}
