package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"time"
)

// A call is limited by the memory it holds, not by what the engine held before it: Go keeps the
// address space of the largest heap it has had, so a limit on the process's data (which the
// caller sets as a backstop) would count every earlier render. The live heap, as each garbage
// collection measures it, is what this call holds; once it passes the call's limit the engine
// ends as Go's runtime does when memory runs out, so that its caller tells it the same way.

// callHeapEnv names the live heap a call may hold, in bytes; unset or 0, no limit.
const callHeapEnv = "HELM_ENGINE_CALL_HEAP"

// How often the live heap is looked at during a call. Go measures it at the end of each
// collection, which its memory limit (GOMEMLIMIT) makes frequent once the heap is large.
const heapCheck = 10 * time.Millisecond

// After a call whose heap grew past this, the heap is given back to the system, so that an
// engine between calls holds its own memory, not its largest render's.
const keepHeap = 64 << 20

// inCall is true while a call runs: only a call's heap is held against its limit.
var inCall atomic.Bool

// callHeapLimit is the live heap a call may hold, as the engine's own environment names it
// (read before the first call replaces the environment).
func callHeapLimit() uint64 {
	limit, _ := strconv.ParseUint(os.Getenv(callHeapEnv), 10, 64)
	return limit
}

// watchHeap ends the engine once a call's live heap passes limit (0: never).
func watchHeap(limit uint64) {
	if limit == 0 {
		return
	}
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	for range time.Tick(heapCheck) {
		if !inCall.Load() {
			continue
		}
		metrics.Read(live)
		if held := live[0].Value.Uint64(); held > limit {
			fmt.Fprintf(os.Stderr, "fatal error: out of memory: a call's live heap reached %d MiB, past the %d MiB a call may hold\n",
				held>>20, limit>>20)
			os.Exit(2)
		}
	}
}

// giveBackHeap returns the heap to the system after a call that grew it, and then tells what
// the engine itself still holds (the live heap after a full collection); 0 when it did not
// look, since looking costs a collection. Helm keeps a little of every call, so an engine's
// caller stops it once that grows.
func giveBackHeap() (retained uint64) {
	heap := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	metrics.Read(heap)
	var held uint64
	for _, sample := range heap {
		held += sample.Value.Uint64()
	}
	if held <= keepHeap {
		return 0
	}
	debug.FreeOSMemory()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	return live[0].Value.Uint64()
}
