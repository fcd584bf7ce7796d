package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The example configuration decodes strictly and what it sets is the
// default: it documents the defaults, it does not change them.
func TestExampleConfigIsTheDefaults(t *testing.T) {
	cfg := defaultServerConfig()
	if err := loadConfigFile("../../leasehold.example.toml", &cfg); err != nil {
		t.Fatal(err)
	}
	if want := defaultServerConfig(); !reflect.DeepEqual(cfg, want) {
		t.Fatalf("the example sets values that are not the defaults:\n got  %+v\n want %+v", cfg, want)
	}
}

// The old single [tls] section is refused with a hint to the new layout.
func TestOldTLSSectionRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.toml")
	os.WriteFile(path, []byte("[tls]\ncert_file = \"a\"\n"), 0o600)
	cfg := defaultServerConfig()
	err := loadConfigFile(path, &cfg)
	if err == nil || !strings.Contains(err.Error(), "[tls.peer] and [tls.api]") {
		t.Fatalf("old [tls]: %v", err)
	}
}

// A node reachable from other hosts needs peer TLS and API authentication,
// or --insecure; loopback needs neither.
func TestExposureRule(t *testing.T) {
	loopback := defaultServerConfig()
	loopback.RaftBind, loopback.APIBind = "127.0.0.1:7711", "localhost:7701"
	if err := loopback.checkExposure(); err != nil {
		t.Fatalf("loopback refused: %v", err)
	}

	exposed := defaultServerConfig() // binds 0.0.0.0
	err := exposed.checkExposure()
	if err == nil || !strings.Contains(err.Error(), "[tls.peer]") || !strings.Contains(err.Error(), "API authentication") {
		t.Fatalf("exposed, nothing configured: %v", err)
	}
	exposed.Auth.Tokens = []TokenEntry{{Name: "ops", Token: "0123456789abcdef", ScopeEntry: ScopeEntry{Role: "admin"}}}
	if err := exposed.checkExposure(); err == nil || strings.Contains(err.Error(), "API authentication") {
		t.Fatalf("exposed with tokens only: %v", err)
	}
	exposed.TLS.Peer = TLSFiles{CertFile: "c", KeyFile: "k", CAFile: "ca"}
	if err := exposed.checkExposure(); err != nil {
		t.Fatalf("exposed with peer TLS and tokens: %v", err)
	}

	advertised := defaultServerConfig()
	advertised.RaftBind, advertised.APIBind, advertised.APIAdvertise = "127.0.0.1:7711", "127.0.0.1:7701", "10.0.0.1:7701"
	if err := advertised.checkExposure(); err == nil || !strings.Contains(err.Error(), "api_advertise 10.0.0.1:7701") {
		t.Fatalf("a non-loopback advertise address: %v", err)
	}
	advertised.Insecure = true
	if err := advertised.checkExposure(); err != nil {
		t.Fatalf("--insecure: %v", err)
	}
}

func TestCredentials(t *testing.T) {
	admin := ScopeEntry{Role: "admin"}
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "tok")
	os.WriteFile(secretFile, []byte("from-a-file-0123456789\n"), 0o600)
	openFile := filepath.Join(dir, "open")
	os.WriteFile(openFile, []byte("from-a-file-0123456789\n"), 0o644)
	t.Setenv("LH_TEST_TOKEN", "from-the-env-0123456789")

	c := defaultServerConfig()
	c.Auth.Tokens = []TokenEntry{
		{Token: "0123456789abcdef", ScopeEntry: admin},
		{Name: "ci", TokenFile: secretFile, ScopeEntry: ScopeEntry{Role: "submitter", Submitter: "ci"}},
		{Name: "gpu", TokenEnv: "LH_TEST_TOKEN", ScopeEntry: ScopeEntry{Role: "worker", Workers: []string{"gpu-*", "w1"}}},
	}
	creds, err := c.credentials()
	if err != nil {
		t.Fatal(err)
	}
	if creds.Tokens[0].Name != "admin-1" || creds.Tokens[1].Secret != "from-a-file-0123456789" ||
		creds.Tokens[2].Secret != "from-the-env-0123456789" || creds.Tokens[2].Workers[0] != "gpu-*" || !creds.Enabled() {
		t.Fatalf("credentials %+v", creds)
	}
	for _, bad := range []struct {
		tokens []TokenEntry
		certs  []CertEntry
		field  string
	}{
		{[]TokenEntry{{Token: "short", ScopeEntry: admin}}, nil, "auth.tokens[0].token"},
		{[]TokenEntry{{Token: "0123456789abcdef", ScopeEntry: ScopeEntry{Role: "root"}}}, nil, "auth.tokens[0].role"},
		{[]TokenEntry{{Name: "a", Token: "0123456789abcdef", ScopeEntry: admin}, {Name: "a", Token: "fedcba9876543210", ScopeEntry: admin}}, nil, "auth.tokens[1].name"},
		{[]TokenEntry{{Token: "0123456789abcdef", TokenFile: secretFile, ScopeEntry: admin}}, nil, "exactly one"},
		{[]TokenEntry{{TokenFile: openFile, ScopeEntry: admin}}, nil, "token_file"},
		{[]TokenEntry{{TokenEnv: "LH_TEST_UNSET", ScopeEntry: admin}}, nil, "token_env"},
		{[]TokenEntry{{Token: "0123456789abcdef", ScopeEntry: ScopeEntry{Role: "worker"}}}, nil, "auth.tokens[0].workers"},
		{[]TokenEntry{{Token: "0123456789abcdef", ScopeEntry: ScopeEntry{Role: "worker", Workers: []string{"a*b"}}}}, nil, "auth.tokens[0].workers"},
		{[]TokenEntry{{Token: "0123456789abcdef", ScopeEntry: ScopeEntry{Role: "submitter"}}}, nil, "auth.tokens[0].submitter"},
		{[]TokenEntry{{Token: "0123456789abcdef", ScopeEntry: ScopeEntry{Role: "admin", Submitter: "x"}}}, nil, "auth.tokens[0].submitter"},
		{nil, []CertEntry{{Name: "ops", ScopeEntry: admin}}, "auth.certs"},
		{nil, []CertEntry{{ScopeEntry: admin}}, "auth.certs[0].name"},
	} {
		c.Auth.Tokens, c.Auth.Certs = bad.tokens, bad.certs
		_, err := c.credentials()
		if err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("%+v: %v, want an error naming %s", bad, err, bad.field)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("a token was echoed: %v", err)
		}
	}
}
