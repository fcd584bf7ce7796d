package api

import "testing"

// Responses share the hint's header value while the leader's address
// stays; a new address gets a slice of its own and leaves the old one as
// it was (a response may still be writing it).
func TestHintValueShared(t *testing.T) {
	s := &Server{}
	a := s.hintValue("10.0.0.1:7701")
	b := s.hintValue("10.0.0.1:7701")
	if len(a) != 1 || a[0] != "10.0.0.1:7701" || &a[0] != &b[0] {
		t.Fatalf("same address: %v and %v, not one shared value", a, b)
	}
	c := s.hintValue("10.0.0.2:7701")
	if len(c) != 1 || c[0] != "10.0.0.2:7701" || &c[0] == &a[0] || a[0] != "10.0.0.1:7701" {
		t.Fatalf("new address: %v (old value now %v)", c, a)
	}
}
