package api

import "testing"

// Without authentication, only a caller on the node's own host, not
// forwarded by another member, may take a heap dump.
func TestLocalCaller(t *testing.T) {
	for _, tc := range []struct {
		remote, via string
		want        bool
	}{
		{"127.0.0.1:4000", "", true},
		{"127.0.0.9:4000", "", true},
		{"[::1]:4000", "", true},
		{"10.0.0.1:4000", "", false},
		{"[2001:db8::1]:4000", "", false},
		{"127.0.0.1:4000", "node-2", false},
		{"localhost:4000", "", false},
		{"garbage", "", false},
	} {
		if got := localCaller(tc.remote, Identity{Via: tc.via}); got != tc.want {
			t.Errorf("%s via %q: %t, want %t", tc.remote, tc.via, got, tc.want)
		}
	}
}
