//go:build chaos_nofence

package api

// A deliberately broken build: every token passes the fence check.
const fenceCheck = false
