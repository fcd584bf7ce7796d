package disk

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

func mountTmpfs(source, dir string, size int64) error {
	return unix.Mount(source, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size))
}

func usage(dir string) (free, total int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

func unmount(dir string) error {
	err := unix.Unmount(dir, 0)
	if errors.Is(err, syscall.EBUSY) {
		err = unix.Unmount(dir, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, syscall.EINVAL) { // EINVAL: not mounted
		return fmt.Errorf("disk: unmount %s: %w", dir, err)
	}
	return nil
}

// alive says whether pid is a running process (one another user owns
// included).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
