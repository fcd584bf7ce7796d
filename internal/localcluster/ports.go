package localcluster

import (
	"errors"
	"fmt"
	"net"
	"os"
)

// Ports are a node's Raft and API sockets, bound on loopback before the
// node starts. The node inherits them as file descriptors 3 and 4 (Flags,
// Files); once it has started, Close gives up this process's copies.
type Ports struct {
	raft, api *net.TCPListener
}

// devPort reports whether port is one of `leasehold dev`'s, which a
// launched node never takes: a developer's dev cluster may be running.
func devPort(port int) bool { return (port >= 7701 && port <= 7703) || (port >= 7711 && port <= 7713) }

// BindPorts binds two free loopback ports.
func BindPorts() (*Ports, error) {
	var ls []*net.TCPListener
	var kept []*net.TCPListener // dev's ports, held until two others are bound
	defer func() {
		for _, l := range kept {
			l.Close()
		}
	}()
	for len(ls) < 2 {
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, fmt.Errorf("localcluster: bind a loopback port: %w", err)
		}
		if devPort(l.Addr().(*net.TCPAddr).Port) {
			kept = append(kept, l)
			continue
		}
		ls = append(ls, l)
	}
	return &Ports{raft: ls[0], api: ls[1]}, nil
}

// BindPortsAt binds the given addresses again (a node restarted after a
// kill keeps its addresses); a port another process took meanwhile is an
// error.
func BindPortsAt(raftAddr, apiAddr string) (*Ports, error) {
	var ls []*net.TCPListener
	for _, a := range []string{raftAddr, apiAddr} {
		addr, err := net.ResolveTCPAddr("tcp", a)
		if err == nil {
			var l *net.TCPListener
			if l, err = net.ListenTCP("tcp", addr); err == nil {
				ls = append(ls, l)
				continue
			}
		}
		for _, l := range ls {
			l.Close()
		}
		return nil, fmt.Errorf("localcluster: bind %s again: %w", a, err)
	}
	return &Ports{raft: ls[0], api: ls[1]}, nil
}

// RaftAddr is the Raft socket's address.
func (p *Ports) RaftAddr() string { return p.raft.Addr().String() }

// APIAddr is the API socket's address.
func (p *Ports) APIAddr() string { return p.api.Addr().String() }

// Flags are the server flags that make it serve on the inherited sockets,
// which Files must pass first (as file descriptors 3 and 4).
func (p *Ports) Flags() []string { return []string{"--raft-fd", "3", "--api-fd", "4"} }

// Files are the sockets, for ProcessConfig.Files; the caller closes them
// once the process has started.
func (p *Ports) Files() ([]*os.File, error) {
	raft, err := p.raft.File()
	if err != nil {
		return nil, err
	}
	api, err := p.api.File()
	if err != nil {
		raft.Close()
		return nil, err
	}
	return []*os.File{raft, api}, nil
}

// Close closes this process's copies of the sockets.
func (p *Ports) Close() error { return errors.Join(p.raft.Close(), p.api.Close()) }
