/* beamprobe_probes.d -- the USDT probes of beamprobe_nif.so (provider
 * `beamprobe'), for bpftrace, SystemTap, perf and gdb.  docs/usdt.md
 * documents every probe; `dtrace -h' makes the header with the is-enabled
 * semaphores (_build/c/gen/beamprobe_probes.h), `dtrace -G' the object
 * defining them (c_src/Makefile).
 *
 * Argument types (every probe starts with the first two unless noted):
 *   key      uint64_t  the process (or port): its 64-bit key, the same
 *                      key as the CTF `pid' field; `process' binds it to
 *                      "<0.123.0>" and the registered name
 *   tid      uint64_t  the OS thread id of the scheduler that ran the
 *                      event (the kernel's pid/tid of sched events)
 *   fkey     uint64_t  a function's key (64-bit hash of its m:f/a text);
 *                      `function' binds it to the text
 *   (char *, uint32_t) a string and its length in bytes (the bytes
 *                      before the NUL); every string argument is also
 *                      NUL-terminated, so where six arguments (bpftrace's
 *                      limit on x86_64: arg0..arg5) leave no room for a
 *                      length, str(arg) reads it
 */
provider beamprobe {
	/* definitions: fired the first time a thread fires a probe about
	 * the key (and again after a while: a bounded per-thread table). */
	probe process(uint64_t key, char *pid, uint32_t pid_len,
		      char *name, uint32_t name_len);
	probe function(uint64_t fkey, char *mfa, uint32_t mfa_len);

	/* calls: mfa as "m:f/arity" text */
	probe call(uint64_t key, uint64_t tid, uint64_t fkey, char *mfa,
		   uint32_t mfa_len, char *args);
	probe return_from(uint64_t key, uint64_t tid, uint64_t fkey,
			  char *mfa, uint32_t mfa_len, char *result);
	probe exception_from(uint64_t key, uint64_t tid, uint64_t fkey,
			     char *mfa, char *class, char *reason);
	probe return_to(uint64_t key, uint64_t tid, uint64_t fkey, char *mfa,
			uint32_t mfa_len);

	/* messages: to_key 0 when the receiver is not a local pid */
	probe send(uint64_t key, uint64_t tid, uint64_t to_key, char *msg,
		   uint32_t msg_len, char *to);
	probe send_to_non_existing_process(uint64_t key, uint64_t tid,
					   uint64_t to_key, char *msg,
					   uint32_t msg_len, char *to);
	probe receive(uint64_t key, uint64_t tid, char *msg, uint32_t msg_len);

	/* processes */
	probe spawn(uint64_t key, uint64_t tid, uint64_t child_key,
		    char *mfargs, uint32_t mfargs_len);
	probe spawned(uint64_t key, uint64_t tid, uint64_t parent_key,
		      char *mfargs, uint32_t mfargs_len);
	probe exit(uint64_t key, uint64_t tid, char *reason,
		   uint32_t reason_len);
	probe link(uint64_t key, uint64_t tid, uint64_t other_key);
	probe unlink(uint64_t key, uint64_t tid, uint64_t other_key);
	probe getting_linked(uint64_t key, uint64_t tid, uint64_t other_key);
	probe getting_unlinked(uint64_t key, uint64_t tid, uint64_t other_key);
	probe register(uint64_t key, uint64_t tid, char *name,
		       uint32_t name_len);
	probe unregister(uint64_t key, uint64_t tid, char *name,
			 uint32_t name_len);

	/* scheduling: exiting 0, 1 (in/out_exiting) or 2 (out_exited) */
	probe sched_in(uint64_t key, uint64_t tid, uint64_t fkey, char *mfa,
		       uint32_t mfa_len, uint32_t exiting);
	probe sched_out(uint64_t key, uint64_t tid, uint64_t fkey, char *mfa,
			uint32_t mfa_len, uint32_t exiting);

	/* garbage collection: major 0 (minor) or 1; sizes in words (the
	 * CTF gc events have all six sizes) */
	probe gc_start(uint64_t key, uint64_t tid, uint32_t major,
		       uint64_t heap_size, uint64_t old_heap_size,
		       uint64_t mbuf_size);
	probe gc_end(uint64_t key, uint64_t tid, uint32_t major,
		     uint64_t heap_size, uint64_t old_heap_size,
		     uint64_t mbuf_size);

	/* ports */
	probe port_open(uint64_t key, uint64_t tid, uint64_t owner_key,
			char *name, uint32_t name_len);
	probe port_closed(uint64_t key, uint64_t tid, char *reason,
			  uint32_t reason_len);

	/* beamprobe:annotate(Tag, Term): the calling process's annotation,
	 * tag and value rendered as Erlang terms ("undefined" tag for
	 * annotate/1) */
	probe annotate(uint64_t key, uint64_t tid, char *tag, uint32_t tag_len,
		       char *value, uint32_t value_len);
};
