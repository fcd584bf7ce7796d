//go:build !chaos_nodelay

package fsm

// delayHonoured: a queued job whose not_before is after the state's time
// waits in the delayed heap. The deliberately broken chaos_nodelay build
// queues it ready at once (its not_before kept), which jepsen-lite must
// catch (I13).
const delayHonoured = true
