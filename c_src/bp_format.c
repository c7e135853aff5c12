/* bp_format.c -- event-class tables and the TSDL metadata generator.
 *
 * Shared by the tracer NIF (which writes the metadata file) and the CLI
 * reader (which decodes events with bp_event_descs).  The layout itself is
 * documented in bp_format.h and docs/format.md.
 */
#include "bp_format.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define BP__FIELD(x, kind, fname) {BP__KT_##kind, #fname, BP_K_##kind},
#define BP__FIELDS(name, id, str, fields, cat)                            \
	static const struct bp_field_desc fields_##name[] = {               \
		fields(BP__FIELD, x)};
BP_EVENTS(BP__FIELDS)
#undef BP__FIELDS

const struct bp_event_desc bp_event_descs[BP_EV_COUNT] = {
#define BP__DESC(name, id, str, fields, cat)                              \
	[id] = {str, #cat, sizeof(fields_##name) / sizeof(fields_##name[0]), \
		fields_##name},
	BP_EVENTS(BP__DESC)
#undef BP__DESC
};
#undef BP__FIELD

const char *const bp_kind_names[BP_K_COUNT] = {
#define BP__KNAME(k, t, doc) #k,
	BP_KINDS(BP__KNAME)
#undef BP__KNAME
};

const char *const bp_kind_docs[BP_K_COUNT] = {
#define BP__KDOC(k, t, doc) doc,
	BP_KINDS(BP__KDOC)
#undef BP__KDOC
};

const char *const bp_drop_cause_names[BP_DROP_COUNT] = {
#define BP__NAME(up, low) #low,
	BP_DROP_CAUSES(BP__NAME)
#undef BP__NAME
};

const char *const bp_session_loss_names[BP_SL_COUNT] = {
#define BP__NAME(up, low) #low,
	BP_SESSION_LOSSES(BP__NAME)
#undef BP__NAME
};

void bp_format_uuid(const uint8_t u[16], char out[37])
{
	snprintf(out, 37,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
		 u[10], u[11], u[12], u[13], u[14], u[15]);
}

struct out {
	char *buf;
	size_t len;
	size_t pos;
	int overflow;
};

__attribute__((format(printf, 2, 3))) static void put(struct out *o,
						      const char *fmt, ...)
{
	va_list ap;
	size_t room = o->pos < o->len ? o->len - o->pos : 0;

	va_start(ap, fmt);
	int n = vsnprintf(o->buf + o->pos, room, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= room) {
		o->overflow = 1;
		o->pos = o->len;
		return;
	}
	o->pos += (size_t)n;
}

/* Writes s as a TSDL string literal body (escaping quotes/backslashes). */
static void put_escaped(struct out *o, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			put(o, "\\%c", c);
		else if (c < 0x20)
			put(o, " ");
		else
			put(o, "%c", c);
	}
}

static const char *type_name(enum bp_field_type t)
{
	switch (t) {
	case BP_T_U8:
		return "uint8_t";
	case BP_T_U32:
		return "uint32_t";
	case BP_T_U64:
		return "uint64_t";
	case BP_T_STR:
		return "string";
	}
	return "uint8_t";
}

int bp_format_metadata(char *buf, size_t len, const uint8_t uuid[16],
		       int64_t offset_ns, const struct bp_env_entry *env,
		       size_t nenv)
{
	struct out o = {buf, len, 0, 0};
	char us[37];
	int64_t off_s = offset_ns / 1000000000;
	int64_t off_ns = offset_ns % 1000000000;

	if (off_ns < 0) { /* babeltrace2 2.0.4 rejects a negative offset */
		off_ns += 1000000000;
		off_s -= 1;
	}
	bp_format_uuid(uuid, us);

	put(&o, "/* CTF 1.8 */\n\n"
		"/* beamprobe trace format %d.%d: see docs/format.md */\n\n",
	    BP_FORMAT_MAJOR, BP_FORMAT_MINOR);
	put(&o, "typealias integer { size = 8; align = 8; signed = false; } "
		":= uint8_t;\n"
		"typealias integer { size = 16; align = 8; signed = false; } "
		":= uint16_t;\n"
		"typealias integer { size = 32; align = 8; signed = false; } "
		":= uint32_t;\n"
		"typealias integer { size = 64; align = 8; signed = false; } "
		":= uint64_t;\n\n");
	put(&o,
	    "trace {\n"
	    "\tmajor = 1;\n\tminor = 8;\n\tuuid = \"%s\";\n"
	    "\tbyte_order = le;\n"
	    "\tpacket.header := struct {\n"
	    "\t\tuint32_t magic;\n\t\tuint8_t uuid[16];\n"
	    "\t\tuint32_t stream_id;\n\t};\n};\n\n",
	    us);
	put(&o, "env {\n\tdomain = \"beam\";\n\ttracer_name = \"beamprobe\";\n"
		"\tbeamprobe_format_major = %d;\n\tbeamprobe_format_minor = %d;\n",
	    BP_FORMAT_MAJOR, BP_FORMAT_MINOR);
	for (size_t i = 0; i < nenv; i++) {
		put(&o, "\t%s = \"", env[i].key);
		put_escaped(&o, env[i].value);
		put(&o, "\";\n");
	}
	put(&o, "};\n\n");
	put(&o,
	    "clock {\n\tname = monotonic;\n\tuuid = \"%s\";\n"
	    "\tdescription = \"CLOCK_MONOTONIC, mapped to wall time\";\n"
	    "\tfreq = 1000000000;\n\tprecision = 1;\n"
	    "\toffset_s = %" PRId64 ";\n\toffset = %" PRId64 ";\n"
	    "\tabsolute = false;\n};\n\n",
	    us, off_s, off_ns);
	put(&o, "typealias integer { size = 64; align = 8; signed = false; "
		"map = clock.monotonic.value; } := clk64_t;\n\n");
	put(&o, "stream {\n\tid = 0;\n"
		"\tpacket.context := struct {\n"
		"\t\tclk64_t timestamp_begin;\n\t\tclk64_t timestamp_end;\n"
		"\t\tuint64_t content_size;\n\t\tuint64_t packet_size;\n"
		"\t\tuint64_t events_discarded;\n"
		"\t\tuint64_t packet_seq_num;\n\t\tuint32_t thread_id;\n\t};\n"
		"\tevent.header := struct { uint16_t id; clk64_t timestamp; };\n"
		"\tevent.context := struct { uint64_t pid; };\n};\n\n");
	for (unsigned id = 0; id < BP_EV_COUNT; id++) {
		const struct bp_event_desc *d = &bp_event_descs[id];
		if (!d->name)
			continue;
		put(&o,
		    "event {\n\tname = \"%s\";\n\tid = %u;\n\tstream_id = 0;\n"
		    "\tfields := struct {\n",
		    d->name, id);
		for (unsigned f = 0; f < d->nfields; f++)
			put(&o, "\t\t%s %s;\n", type_name(d->fields[f].type),
			    d->fields[f].name);
		put(&o, "\t};\n};\n\n");
	}
	if (o.overflow)
		return -1;
	return (int)o.pos;
}
