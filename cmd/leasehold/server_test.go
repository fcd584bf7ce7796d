package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// --log-json writes one JSON object per line, with the message and pairs
// as fields; without it, text.
func TestJSONLogs(t *testing.T) {
	var buf bytes.Buffer
	newLogger("info", true, &buf).Named("leader").Info("leadership_established", "term", 3)
	newLogger("info", true, &buf).Debug("below the level")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not one JSON object: %q: %v", buf.String(), err)
	}
	if line["@message"] != "leadership_established" || line["term"] != 3.0 || line["@module"] != "leasehold.leader" || line["@level"] != "info" {
		t.Fatalf("line %v", line)
	}
	buf.Reset()
	newLogger("info", false, &buf).Info("leadership_established", "term", 3)
	if strings.HasPrefix(buf.String(), "{") || !strings.Contains(buf.String(), "leadership_established: term=3") {
		t.Fatalf("text line %q", buf.String())
	}
}
