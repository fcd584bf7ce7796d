//go:build !chaos_refire

package fsm

// slotOnce: a FireSchedule for a slot at or before the schedule's LastSlot
// changes nothing. The deliberately broken chaos_refire build fires it
// again, which jepsen-lite must catch (I14).
const slotOnce = true
