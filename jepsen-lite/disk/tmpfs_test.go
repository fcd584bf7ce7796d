package disk

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A tmpfs fills to the last page, refuses the next write with ENOSPC,
// takes writes again once freed, and its data outlives it when saved.
func TestFillAndFree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "n1")
	d, err := Mount(dir, "n1", 4<<20)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("cannot mount here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer d.Unmount()
	if err := os.WriteFile(filepath.Join(d.Data(), "raft.db"), []byte("log"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := d.Fill()
	if err != nil || n < 3<<20 || n > 4<<20 {
		t.Fatalf("filled %d bytes of 4 MiB: %v", n, err)
	}
	if free, _, err := d.Usage(); err != nil || free != 0 {
		t.Fatalf("free after the fill: %d, %v", free, err)
	}
	err = os.WriteFile(filepath.Join(d.Data(), "more"), make([]byte, 8<<10), 0o600)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write to a full disk: %v", err)
	}
	if n2, err := d.Fill(); err != nil || n2 != 0 || d.Filled() != n {
		t.Fatalf("filling a full disk: %d, %v, filled %d", n2, err, d.Filled())
	}
	if err := d.Free(); err != nil || d.Filled() != 0 {
		t.Fatalf("free: %v, filled %d", err, d.Filled())
	}
	if err := os.WriteFile(filepath.Join(d.Data(), "more"), make([]byte, 8<<10), 0o600); err != nil {
		t.Fatalf("a write after the free: %v", err)
	}
	mounts, err := ownedMounts()
	if err != nil || !containsDir(mounts, dir) {
		t.Fatalf("the mount is not found as ours: %v %v", mounts, err)
	}
	saved := filepath.Join(t.TempDir(), "saved")
	if err := d.SaveTo(saved); err != nil {
		t.Fatal(err)
	}
	if err := d.Unmount(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(saved, "raft.db")); err != nil || string(b) != "log" {
		t.Fatalf("saved data: %q %v", b, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the mount point is left: %v", err)
	}
	if err := d.Unmount(); err != nil {
		t.Fatalf("a second unmount: %v", err)
	}
}

func containsDir(ms []ownedMount, dir string) bool {
	for _, m := range ms {
		if m.dir == dir && m.pid == os.Getpid() {
			return true
		}
	}
	return false
}

// Only tmpfs mounts named by a Disk are ours, whoever mounted them; their
// owners' ids come back from the names.
func TestParseMountinfo(t *testing.T) {
	info := strings.Join([]string{
		`22 1 0:21 / /proc rw,nosuid - proc proc rw`,
		`90 30 0:55 / /tmp/run/disk/n1 rw,nosuid,nodev shared:50 - tmpfs ` + sourceName(4242, "n1") + ` rw,size=65536k`,
		`91 30 0:56 / /tmp/with\040space rw - tmpfs ` + sourceName(77, "n2") + ` rw`,
		`92 30 0:57 / /dev/shm rw - tmpfs tmpfs rw`,
		`93 30 0:58 / /mnt/x rw - ext4 ` + sourceName(5, "n3") + ` rw`,
	}, "\n")
	got, err := parseMountinfo(strings.NewReader(info))
	if err != nil {
		t.Fatal(err)
	}
	want := []ownedMount{{"/tmp/run/disk/n1", 4242}, {"/tmp/with space", 77}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v, want %v", got, want)
	}
}
