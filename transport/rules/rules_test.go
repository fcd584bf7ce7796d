package rules

import (
	"errors"
	"strings"
	"testing"
)

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want error // nil, ErrInvalid or ErrTooLarge
	}{
		{"id", CheckID("f", "job-1"), nil},
		{"id empty", CheckID("f", ""), ErrInvalid},
		{"id space", CheckID("f", "a b"), ErrInvalid},
		{"id control", CheckID("f", "a\x00"), ErrInvalid},
		{"id non-ascii", CheckID("f", "é"), ErrInvalid},
		{"id at bound", CheckID("f", strings.Repeat("a", MaxIDLen)), nil},
		{"id long", CheckID("f", strings.Repeat("a", MaxIDLen+1)), ErrTooLarge},
		{"optional id empty", CheckOptionalID("f", ""), nil},
		{"optional id bad", CheckOptionalID("f", "a b"), ErrInvalid},
		{"name", CheckName("f", "Eval_1.x-y"), nil},
		{"name empty", CheckName("f", ""), ErrInvalid},
		{"name slash", CheckName("f", "a/b"), ErrInvalid},
		{"name long", CheckName("f", strings.Repeat("a", MaxNameLen+1)), ErrTooLarge},
		{"names", CheckNames("f", []string{"a", "b"}), nil},
		{"names none", CheckNames("f", nil), nil},
		{"names twice", CheckNames("f", []string{"a", "a"}), ErrInvalid},
		{"names many", CheckNames("f", make([]string, MaxSelectors+1)), ErrTooLarge},
		{"text", CheckText("f", "line 1\n\tline 2 ✓", 100), nil},
		{"text control", CheckText("f", "a\rb", 100), ErrInvalid},
		{"text del", CheckText("f", "a\x7f", 100), ErrInvalid},
		{"text utf-8", CheckText("f", "a\xff", 100), ErrInvalid},
		{"text long", CheckText("f", "abc", 2), ErrTooLarge},
		{"version empty", CheckVersion("f", ""), nil},
		{"version", CheckVersion("f", "v1.2.3-rc.1+abc"), nil},
		{"version space", CheckVersion("f", "go 1.25"), ErrInvalid},
		{"version long", CheckVersion("f", strings.Repeat("1", MaxVersionLen+1)), ErrTooLarge},
		{"payload", CheckPayload("f", make([]byte, MaxPayloadLen)), nil},
		{"payload long", CheckPayload("f", make([]byte, MaxPayloadLen+1)), ErrTooLarge},
		{"addr", CheckAddr("f", "10.0.0.1:7700"), nil},
		{"addr ipv6", CheckAddr("f", "[::1]:7700"), nil},
		{"addr empty", CheckAddr("f", ""), ErrInvalid},
		{"addr no port", CheckAddr("f", "host:"), ErrInvalid},
		{"addr no host", CheckAddr("f", ":7700"), ErrInvalid},
		{"addr port", CheckAddr("f", "host:http"), ErrInvalid},
		{"addr space", CheckAddr("f", "a b:1"), ErrInvalid},
		{"addr long", CheckAddr("f", strings.Repeat("a", MaxAddrLen)+":1"), ErrTooLarge},
		{"token", CheckToken("f", 1), nil},
		{"token zero", CheckToken("f", 0), ErrInvalid},
		{"range", CheckRange("f", 3, 1, 3), nil},
		{"range low", CheckRange("f", 0, 1, 3), ErrInvalid},
		{"range high", CheckRange("f", 4, 1, 3), ErrInvalid},
	} {
		if tc.want == nil {
			if tc.err != nil {
				t.Errorf("%s: %v", tc.name, tc.err)
			}
			continue
		}
		var fe *FieldError
		if !errors.Is(tc.err, tc.want) || !errors.As(tc.err, &fe) || fe.Field != "f" {
			t.Errorf("%s: %v, want a FieldError of field f wrapping %v", tc.name, tc.err, tc.want)
		}
	}
}

func TestFieldErrorMessage(t *testing.T) {
	err := CheckID("job_id", "")
	if err.Error() != "job_id: must not be empty" {
		t.Fatalf("message %q", err)
	}
	if errors.Is(err, ErrTooLarge) {
		t.Fatal("an empty id is too large")
	}
	if err := TooLong("payload", 3, 2); err.Error() != "payload: length 3 exceeds 2" || errors.Is(err, ErrInvalid) {
		t.Fatalf("too long: %v", err)
	}
}
