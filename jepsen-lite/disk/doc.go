// Package disk gives a node of a jepsen-lite run a file system of its
// own, a small tmpfs the runner mounts under the run's directory, so that
// the disk nemesis can fill it to the last byte and free it again: what a
// node sees when the disk under its data dir runs out of space, without
// touching any other file system.
//
// Mounting needs root (CAP_SYS_ADMIN); Mount says so when it cannot, and
// the runner then skips the disk faults with a note. Every tmpfs is
// mounted with a source name that carries the creating process's id
// (Prefix, the id in base 36, a dash, the node's name), so CleanLeftovers
// finds and unmounts what a runner killed with SIGKILL left behind, as
// `jepsen-lite clean` does for the network.
package disk
