package cluster_test

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkSyncPreallocated times one small append and its sync to a file
// preallocated as raft-wal preallocates its segments, with fsync (what the
// WAL does) and with fdatasync (which could skip the inode's timestamps,
// since an append into a preallocated file changes no size). Run it on the
// disk the data directory is on:
//
//	TMPDIR=/path/on/that/disk go test -run '^$' -bench SyncPreallocated -count 2 ./cluster/
func BenchmarkSyncPreallocated(b *testing.B) {
	for _, c := range []struct {
		name string
		sync func(f *os.File) error
	}{
		{"fsync", (*os.File).Sync},
		{"fdatasync", func(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, err := os.OpenFile(filepath.Join(b.TempDir(), "segment"), os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			const size, record = 64 << 20, 400 // a batch of two or three entries
			if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
				b.Skipf("fallocate: %v", err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, record)
			var off int64
			b.ResetTimer()
			for range b.N {
				if off+record > size {
					off = 0
				}
				if _, err := f.WriteAt(buf, off); err != nil {
					b.Fatal(err)
				}
				off += record
				if err := c.sync(f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
