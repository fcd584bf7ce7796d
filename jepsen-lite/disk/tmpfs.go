package disk

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Prefix starts the source name of every tmpfs a Disk mounts.
const Prefix = "lhjdisk"

// ErrUnsupported: this process cannot mount a tmpfs.
var ErrUnsupported = errors.New("disk: mounting a tmpfs needs root (CAP_SYS_ADMIN)")

// fillerName is the file Fill writes beside the node's data dir.
const fillerName = "filler"

// Disk is one mounted tmpfs. The node's data dir is Data(); Fill and Free
// write and remove a file beside it. Its methods are safe for concurrent
// use.
type Disk struct {
	dir  string // the mount point
	size int64

	mu     sync.Mutex
	filled int64 // bytes Fill wrote and Free has not removed
	gone   bool  // unmounted
}

// Mount mounts a tmpfs of size bytes at dir (made if missing), named for
// this process and name, and makes its data dir.
func Mount(dir, name string, size int64) (*Disk, error) {
	if size <= 0 {
		return nil, fmt.Errorf("disk: size %d", size)
	}
	if os.Geteuid() != 0 {
		return nil, ErrUnsupported
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	source := sourceName(os.Getpid(), name)
	if err := mountTmpfs(source, dir, size); err != nil {
		if errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("%w: mount %s: %v", ErrUnsupported, dir, err)
		}
		return nil, fmt.Errorf("disk: mount tmpfs at %s: %w", dir, err)
	}
	d := &Disk{dir: dir, size: size}
	if err := os.Mkdir(d.Data(), 0o700); err != nil {
		d.Unmount()
		return nil, err
	}
	return d, nil
}

func sourceName(pid int, name string) string {
	return Prefix + strconv.FormatInt(int64(pid), 36) + "-" + name
}

// Dir is the mount point; Data the node's data dir on it.
func (d *Disk) Dir() string  { return d.dir }
func (d *Disk) Data() string { return filepath.Join(d.dir, "data") }

// Size is the tmpfs's size in bytes.
func (d *Disk) Size() int64 { return d.size }

// Fill writes a file of zeros beside the data dir until the file system
// has no room left (ENOSPC), and returns how many bytes it wrote. Filling
// a full disk writes nothing more.
func (d *Disk) Fill() (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(d.dir, fillerName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("disk: fill %s: %w", d.dir, err)
	}
	defer f.Close()
	var n int64
	// Big chunks, then pages: tmpfs takes what fits of a short write, and
	// the last page is what the node would have had.
	for _, chunk := range []int{1 << 20, 4 << 10} {
		buf := make([]byte, chunk)
		for {
			w, err := f.Write(buf)
			n += int64(w)
			if err == nil {
				continue
			}
			if !errors.Is(err, syscall.ENOSPC) {
				d.filled += n
				return n, fmt.Errorf("disk: fill %s: %w", d.dir, err)
			}
			break
		}
	}
	d.filled += n
	return n, nil
}

// Free removes what Fill wrote.
func (d *Disk) Free() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := os.Remove(filepath.Join(d.dir, fillerName))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if err == nil {
		d.filled = 0
	}
	return err
}

// Filled is how many bytes Fill wrote that Free has not removed.
func (d *Disk) Filled() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.filled
}

// Free space and size of the file system, in bytes.
func (d *Disk) Usage() (free, total int64, err error) {
	return usage(d.dir)
}

// SaveTo copies the data dir to dst (on another file system), so it
// outlives the tmpfs.
func (d *Disk) SaveTo(dst string) error { return copyTree(d.Data(), dst) }

// Unmount unmounts the tmpfs (detaching it if it is busy) and removes the
// mount point. Everything on it is gone. It is safe to call twice.
func (d *Disk) Unmount() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone {
		return nil
	}
	if err := unmount(d.dir); err != nil {
		return err
	}
	d.gone = true
	return os.Remove(d.dir)
}

var ownedRe = regexp.MustCompile(`^` + Prefix + `([0-9a-z]+)-`)

// CleanLeftovers unmounts every tmpfs of a Disk whose process is gone.
func CleanLeftovers() error {
	mounts, err := ownedMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if !alive(m.pid) {
			errs = append(errs, unmount(m.dir))
		}
	}
	return errors.Join(errs...)
}

type ownedMount struct {
	dir string
	pid int
}

// ownedMounts lists the tmpfs mounts whose source name a Disk gave.
func ownedMounts() ([]ownedMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

// parseMountinfo reads /proc/PID/mountinfo lines: "id parent major:minor
// root mountpoint options [optional fields] - fstype source superoptions".
func parseMountinfo(r io.Reader) ([]ownedMount, error) {
	var out []ownedMount
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 2 || g[0] != "tmpfs" {
			continue
		}
		m := ownedRe.FindStringSubmatch(g[1])
		if m == nil {
			continue
		}
		pid, err := strconv.ParseInt(m[1], 36, 64)
		if err != nil {
			continue
		}
		out = append(out, ownedMount{dir: unescapeOctal(f[4]), pid: int(pid)})
	}
	return out, sc.Err()
}

// unescapeOctal undoes mountinfo's \040-style escapes (space, tab,
// newline, backslash).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, de os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := de.Info()
		if err != nil {
			return err
		}
		switch {
		case de.IsDir():
			return os.MkdirAll(target, info.Mode().Perm())
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		}
		return nil
	})
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
