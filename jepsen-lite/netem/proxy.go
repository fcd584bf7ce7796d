package netem

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections to one endpoint's port, applying the
// Links between whoever connected (named by its source address) and the
// endpoint behind it.
type Proxy struct {
	ln       net.Listener
	target   string
	owner    string
	identify func(ip string) string
	links    *Links

	closed chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	done   bool
}

// dialTimeout bounds the proxy's connection to the endpoint behind it.
const dialTimeout = 2 * time.Second

// NewProxy listens on listen and forwards to target, which is endpoint
// owner. identify names a connection's source IP ("" for an unknown one,
// whose links are never broken).
func NewProxy(listen, target, owner string, identify func(ip string) string, links *Links) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, owner: owner, identify: identify, links: links,
		closed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, cuts every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return nil
	}
	p.done = true
	close(p.closed)
	err := p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve forwards one connection both ways until both directions end or
// the proxy closes.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	peer := ""
	if a, ok := client.RemoteAddr().(*net.TCPAddr); ok {
		peer = p.identify(a.IP.String())
	}
	d := net.Dialer{Timeout: dialTimeout}
	backend, err := d.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(backend) {
		return
	}
	defer p.untrack(backend)
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(client, backend, peer, p.owner) }()
	go func() { defer pumps.Done(); p.pump(backend, client, p.owner, peer) }()
	pumps.Wait()
}

type chunk struct {
	data []byte
	due  time.Time
}

// pump copies src to dst as link from→to allows: held while blocked, each
// chunk no earlier than its due time, in order. A read error other than
// EOF cuts both connections.
func (p *Proxy) pump(src, dst net.Conn, from, to string) {
	ch := make(chan chunk, 64)
	var reader sync.WaitGroup
	reader.Add(1)
	go func() {
		defer reader.Done()
		defer close(ch)
		var last time.Time
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				due := time.Now().Add(p.links.wait(from, to))
				if due.Before(last) {
					due = last
				}
				last = due
				select {
				case ch <- chunk{buf[:n], due}:
				case <-p.closed:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					src.Close()
					dst.Close()
				}
				return
			}
		}
	}()
	defer reader.Wait()
	for c := range ch {
		if !p.deliverable(c.due, from, to) {
			dst.Close()
			src.Close()
			for range ch {
			}
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			src.Close()
			for range ch {
			}
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}

// deliverable waits until the link is open and due has come; false if the
// proxy closed first.
func (p *Proxy) deliverable(due time.Time, from, to string) bool {
	for {
		blocked, changed := p.links.Blocked(from, to)
		if blocked {
			select {
			case <-changed:
				continue
			case <-p.closed:
				return false
			}
		}
		d := time.Until(due)
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-changed: // a block may have begun while it waited
			t.Stop()
		case <-p.closed:
			t.Stop()
			return false
		}
	}
}
