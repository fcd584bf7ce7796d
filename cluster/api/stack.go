package api

import "net/http"

// HTTP/2 runs every request's handler on a goroutine of its own, which
// starts with a small stack (the runtime's average). Connect, our
// interceptors and the cluster call below them go deeper than that, so
// nearly every call grew its stack once, half way down, where the runtime
// had to walk and copy a dozen frames: 6 % of a busy leader's CPU in a
// profile of job-cycle c=64 (runtime.newstack under
// connect.negotiateCompression). grownStack grows the stack at the top of
// the chain instead, at once to the size the call needs, while it holds
// only the HTTP/2 server's few frames.

// handlerStackBytes is the frame growStack asks for. Called at the top of
// the chain, with at most a few KiB of the stack used, it makes the
// runtime double a smaller stack to 16 KiB (a size it keeps in per-CPU
// caches on Linux), in which a call through the API fits.
const handlerStackBytes = 8 << 10

// stackIndex and stackUse keep growStack's frame: the compiler cannot
// tell that stackUse, behind which the frame is declared and read, is
// never true, nor that stackIndex, the byte read, is always zero.
var (
	stackIndex int
	stackUse   bool
)

// growStack makes the calling goroutine's stack hold a frame of
// handlerStackBytes, growing it in one step if it is smaller. The frame
// is declared in a branch never taken: the function's frame, which its
// prologue checks the stack against, still holds it, but nothing writes
// it: zeroing 8 KiB of a stack fresh from the runtime's cache was 1.3 %
// of the leader's CPU samples in a profile of job-cycle c=64.
//
//go:noinline
func growStack() byte {
	if stackUse {
		var frame [handlerStackBytes]byte
		return frame[stackIndex]
	}
	return 0
}

// grownStack runs next on a stack grown by growStack.
func grownStack(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		growStack()
		next.ServeHTTP(w, r)
	})
}
