//go:build !chaos_tokenreuse

package fsm

// floorOnlyRises: a token floor only ever raises the token counter. The
// deliberately broken chaos_tokenreuse build turns it off, which
// jepsen-lite must catch (I1).
const floorOnlyRises = true
