package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/transport"
)

// tlsCommand is `leasehold tls`, like `consul tls`: a CA and the
// certificates of a cluster's servers and clients, as PEM files. The
// certificates are made by transport (CA, CertRequest); this file handles
// flags and files only.
func tlsCommand() *cli.Command {
	return &cli.Command{
		Name:  "tls",
		Usage: "make a CA and certificates for servers and clients (offline)",
		Subcommands: []*cli.Command{
			{Name: "ca", Usage: "the cluster's certificate authority", Subcommands: []*cli.Command{tlsCACreateCommand()}},
			{Name: "cert", Usage: "server and client certificates", Subcommands: []*cli.Command{tlsCertCreateCommand()}},
		},
	}
}

const (
	caDays   = 5 * 365
	certDays = 365
	maxDays  = 100 * 365
)

// tlsFlags are the flags both create commands take; days is the default
// validity.
func tlsFlags(days int) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cluster", Value: transport.DefaultClusterName,
			Usage: "cluster name, in the certificates and the file names (letters, digits, '-', '_', dots between)"},
		&cli.IntFlag{Name: "days", Value: days, Usage: "days the certificate is valid"},
		&cli.StringFlag{Name: "dir", Value: ".", Usage: "existing directory to write the files into"},
		&cli.BoolFlag{Name: "force", Usage: "overwrite files that already exist"},
		outputFlag(nil),
	}
}

func tlsCACreateCommand() *cli.Command {
	return &cli.Command{
		Name:         "create",
		Usage:        "make a CA: writes <cluster>-ca.pem and <cluster>-ca-key.pem (mode 0600) into --dir",
		Flags:        tlsFlags(caDays),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			opts, err := tlsOptionsOf(c)
			if err != nil {
				return err
			}
			paths := []string{opts.path(opts.cluster + "-ca.pem"), opts.path(opts.cluster + "-ca-key.pem")}
			if err := opts.refuseExisting(paths...); err != nil {
				return err
			}
			ca, err := transport.NewCA(opts.cluster, opts.validity)
			if err != nil {
				return err
			}
			p := ca.PEM()
			files := []pemFile{{paths[0], p.Cert, 0o644}, {paths[1], p.Key, 0o600}}
			if err := writeFiles(files, opts.force); err != nil {
				return err
			}
			return printWritten(c, map[string]any{"cluster": opts.cluster}, paths)
		},
	}
}

func tlsCertCreateCommand() *cli.Command {
	flags := append([]cli.Flag{
		&cli.BoolFlag{Name: "server", Usage: "a server certificate for node --node (server and client authentication)"},
		&cli.BoolFlag{Name: "client", Usage: "an API client certificate for --name (client authentication only)"},
		&cli.StringFlag{Name: "node", Usage: "the node id the server certificate speaks for (with --server)"},
		&cli.StringFlag{Name: "name", Usage: "the client's name (with --client)"},
		&cli.StringSliceFlag{Name: "ip",
			Usage: "an IP address the server is reached at (repeatable; 127.0.0.1 is always added, so the node's own CLI can reach it)"},
		&cli.StringSliceFlag{Name: "dns",
			Usage: "a DNS name the server is reached at (repeatable; localhost is always added, so the node's own CLI can reach it)"},
		&cli.StringFlag{Name: "ca", DefaultText: "<dir>/<cluster>-ca.pem", Usage: "the CA certificate to sign with"},
		&cli.StringFlag{Name: "ca-key", DefaultText: "<dir>/<cluster>-ca-key.pem", Usage: "the CA's private key"},
	}, tlsFlags(certDays)...)
	return &cli.Command{
		Name: "create",
		Usage: "make a certificate signed by the CA: writes <cluster>-server-<node>.pem or <cluster>-client-<name>.pem " +
			"and its -key.pem (mode 0600) into --dir",
		Flags:        flags,
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			opts, err := tlsOptionsOf(c)
			if err != nil {
				return err
			}
			req, base, err := certRequestOf(c, opts)
			if err != nil {
				return err
			}
			paths := []string{opts.path(base + ".pem"), opts.path(base + "-key.pem")}
			if err := opts.refuseExisting(paths...); err != nil {
				return err
			}
			ca, err := loadCA(c, opts)
			if err != nil {
				return err
			}
			p, err := ca.Issue(req)
			if err != nil {
				return err
			}
			if end := ca.Certificate().NotAfter; time.Now().Add(req.Validity).After(end) {
				fmt.Fprintf(c.App.ErrWriter, "note: the certificate ends with its CA, on %s\n", end.UTC().Format(time.DateOnly))
			}
			files := []pemFile{{paths[0], p.Cert, 0o644}, {paths[1], p.Key, 0o600}}
			if err := writeFiles(files, opts.force); err != nil {
				return err
			}
			return printWritten(c, map[string]any{"identity": req.Identity.String()}, paths)
		},
	}
}

// tlsOptions are the flags both create commands share, checked.
type tlsOptions struct {
	cluster  string
	validity time.Duration
	dir      string
	force    bool
}

func (o tlsOptions) path(name string) string { return filepath.Join(o.dir, name) }

// refuseExisting fails, before anything is made, if a file would be
// overwritten without --force. writeFiles checks again as it writes.
func (o tlsOptions) refuseExisting(paths ...string) error {
	if o.force {
		return nil
	}
	for _, p := range paths {
		_, err := os.Lstat(p)
		if err == nil {
			return errExists(p)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func tlsOptionsOf(c *cli.Context) (tlsOptions, error) {
	o := tlsOptions{cluster: c.String("cluster"), dir: c.String("dir"), force: c.Bool("force")}
	if out := flagString(c, "output"); out != "table" && out != "json" {
		return o, usagef("--output %q: table or json", out)
	}
	if err := checkFileNamePart("cluster", o.cluster); err != nil {
		return o, err
	}
	if err := transport.CheckClusterName(o.cluster); err != nil {
		return o, usagef("--cluster: %v", err)
	}
	days := c.Int("days")
	if days < 1 || days > maxDays {
		return o, usagef("--days %d: between 1 and %d", days, maxDays)
	}
	o.validity = time.Duration(days) * 24 * time.Hour
	if info, err := os.Stat(o.dir); err != nil || !info.IsDir() {
		return o, usagef("--dir %s: not an existing directory", o.dir)
	}
	return o, nil
}

// certRequestOf reads what cert create is asked to make, and the base of
// its file names.
func certRequestOf(c *cli.Context, o tlsOptions) (transport.CertRequest, string, error) {
	req := transport.CertRequest{Validity: o.validity}
	server, client := c.Bool("server"), c.Bool("client")
	node, name := c.String("node"), c.String("name")
	ips, dns := splitList(c.StringSlice("ip")), splitList(c.StringSlice("dns"))
	switch {
	case server == client:
		return req, "", usagef("give one of --server and --client")
	case server && !c.IsSet("node"):
		return req, "", usagef("--server needs --node ID")
	case server && c.IsSet("name"):
		return req, "", usagef("--name goes with --client; a server is named by --node")
	case client && !c.IsSet("name"):
		return req, "", usagef("--client needs --name NAME")
	case client && c.IsSet("node"):
		return req, "", usagef("--node goes with --server; a client is named by --name")
	case client && (len(ips) > 0 || len(dns) > 0):
		return req, "", usagef("--ip and --dns go with --server")
	}
	if client {
		if err := checkFileNamePart("name", name); err != nil {
			return req, "", err
		}
		req.Identity = transport.ClientIdentity(o.cluster, name)
		return req, o.cluster + "-client-" + name, nil
	}
	if err := checkFileNamePart("node", node); err != nil {
		return req, "", err
	}
	req.Identity = transport.ServerIdentity(o.cluster, node)
	req.IPs = []net.IP{net.IPv4(127, 0, 0, 1)}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return req, "", usagef("--ip %q: not an IP address", s)
		}
		if !slices.ContainsFunc(req.IPs, ip.Equal) {
			req.IPs = append(req.IPs, ip)
		}
	}
	req.DNSNames = []string{"localhost"}
	for _, d := range dns {
		if !slices.ContainsFunc(req.DNSNames, func(have string) bool { return strings.EqualFold(have, d) }) {
			req.DNSNames = append(req.DNSNames, d)
		}
	}
	return req, o.cluster + "-server-" + node, nil
}

// loadCA reads the CA from --ca and --ca-key, by default the files ca
// create wrote into --dir.
func loadCA(c *cli.Context, o tlsOptions) (*transport.CA, error) {
	certFile, keyFile := c.String("ca"), c.String("ca-key")
	if certFile == "" {
		certFile = o.path(o.cluster + "-ca.pem")
	}
	if keyFile == "" {
		keyFile = o.path(o.cluster + "-ca-key.pem")
	}
	var p transport.PEMPair
	var err error
	if p.Cert, err = os.ReadFile(certFile); err == nil {
		p.Key, err = os.ReadFile(keyFile)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (make a CA with leasehold tls ca create, or name it with --ca and --ca-key)", err)
	}
	if err != nil {
		return nil, err
	}
	ca, err := transport.LoadCA(p)
	if err != nil {
		return nil, fmt.Errorf("%s / %s: %w", certFile, keyFile, err)
	}
	return ca, nil
}

// checkFileNamePart refuses a value that would take a file out of --dir,
// hide it, or break the one line printed for it.
func checkFileNamePart(flag, v string) error {
	switch {
	case v == "":
		return usagef("--%s is empty", flag)
	case strings.ContainsAny(v, `/\`):
		return usagef("--%s %q: it is part of a file name, so it cannot contain / or \\", flag, v)
	case strings.HasPrefix(v, "."):
		return usagef("--%s %q: it is part of a file name, so it cannot start with '.'", flag, v)
	case strings.ContainsFunc(v, unicode.IsControl):
		return usagef("--%s %q: it is part of a file name, so it cannot contain control characters", flag, v)
	}
	return nil
}

func printWritten(c *cli.Context, v map[string]any, paths []string) error {
	v["files"] = paths
	return output(c, v, func() {
		for _, p := range paths {
			fmt.Fprintf(c.App.Writer, "wrote %s\n", p)
		}
	})
}

// pemFile is one file a tls command writes.
type pemFile struct {
	path string
	data []byte
	mode os.FileMode
}

func errExists(path string) error {
	return fmt.Errorf("%s already exists (--force overwrites it)", path)
}

// writeFiles writes each file whole or not at all. Without force a file
// that exists is an error, and the files this call already wrote are
// removed again, so a refusal leaves the directory as it was.
func writeFiles(files []pemFile, force bool) error {
	var written []string
	for _, f := range files {
		if err := writeFileAtomic(f, force); err != nil {
			if !force {
				for _, p := range written {
					os.Remove(p)
				}
			}
			return err
		}
		written = append(written, f.path)
	}
	return nil
}

// writeFileAtomic writes f to a temporary file beside it (created 0600, so
// a key is never readable by others, not even half written), syncs it, and
// then moves it into place: with force by rename, which replaces an old
// file; without, by link, which fails if the file has appeared since it
// was checked.
func writeFileAtomic(f pemFile, force bool) error {
	dir := filepath.Dir(f.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a rename it is gone; after a link it is a second name
	_, err = tmp.Write(f.data)
	if err == nil {
		err = tmp.Chmod(f.mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", f.path, err)
	}
	if force {
		err = os.Rename(tmp.Name(), f.path)
	} else if err = os.Link(tmp.Name(), f.path); errors.Is(err, fs.ErrExist) {
		return errExists(f.path)
	} else if err != nil {
		// A file system without hard links: rename, after the check
		// refuseExisting made.
		err = os.Rename(tmp.Name(), f.path)
	}
	if err != nil {
		return err
	}
	syncDir(dir)
	return nil
}

// syncDir makes a rename in dir durable. Best effort: not every system can
// sync a directory, and the file itself is already synced.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// usagef is a usage error: main prints it on one line and exits 2.
func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// usageError makes urfave/cli's flag errors (an unknown flag, --days x)
// usage errors too, reported like the others instead of with the help.
func usageError(_ *cli.Context, err error, _ bool) error {
	return usagef("%v", err)
}
