// Command leasehold is the server and the CLI of leasehold.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
	// The time zone database, for schedules' zones on a host without one
	// (a minimal container): the system's is used first.
	_ "time/tzdata"

	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/transport/rules"
)

// Set at build time: go build -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	app := newApp()
	if err := app.Run(interspersed(app, os.Args)); err != nil {
		fmt.Fprintln(os.Stderr, "leasehold: "+oneLine(err))
		os.Exit(exitCode(err))
	}
}

// exitCode is 2 for a command used wrongly (errUsage), 1 for any other
// failure.
func exitCode(err error) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

// globalFlags may be given before the command or after it. Only the
// app-level copies read LEASEHOLD_* variables, so a flag given on the
// command line, anywhere, beats the environment.
func globalFlags() []cli.Flag {
	return withEnv(false)
}

func withEnv(env bool) []cli.Flag {
	e := func(name string) []string {
		if env {
			return []string{name}
		}
		return nil
	}
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "endpoints", Aliases: []string{"e"}, EnvVars: e("LEASEHOLD_ENDPOINTS"),
			Value: cli.NewStringSlice(client.DefaultEndpoints()...), Usage: "API addresses of the cluster (leasehold dev's by default)"},
		&cli.StringFlag{Name: "token", EnvVars: e("LEASEHOLD_TOKEN"), Usage: "bearer token"},
		&cli.StringFlag{Name: "ca-file", EnvVars: e("LEASEHOLD_CA_FILE"), Usage: "CA to verify the API's TLS certificate (turns TLS on)"},
		&cli.StringFlag{Name: "cert-file", EnvVars: e("LEASEHOLD_CERT_FILE"), Usage: "client certificate, for an API that requires mutual TLS (with --key-file; turns TLS on)"},
		&cli.StringFlag{Name: "key-file", EnvVars: e("LEASEHOLD_KEY_FILE"), Usage: "the client certificate's private key"},
		outputFlag(e("LEASEHOLD_OUTPUT")),
		&cli.DurationFlag{Name: "timeout", EnvVars: e("LEASEHOLD_TIMEOUT"), Value: 15 * time.Second, Usage: "bound on each command"},
	}
}

func outputFlag(envVars []string) cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, EnvVars: envVars, Value: "table", Usage: "table or json"}
}

// addGlobalFlags gives every command that does something the global flags
// too, so "leasehold job get X -o json" works like "leasehold -o json job
// get X". server and dev have their own flags; tls works offline and takes
// only --output (an API flag such as --ca-file beside its --ca would be
// accepted and silently ignored). A command that has a flag of a global
// flag's name keeps its own (job submit's --timeout is the job's): the
// global one is then given before the command, and lookup passes the
// command's by.
func addGlobalFlags(cmds []*cli.Command) {
	for _, cmd := range cmds {
		if cmd.Name == "tls" || cmd.Name == "supervise" {
			continue
		}
		if cmd.Action != nil && cmd.Name != "server" && cmd.Name != "dev" {
			for _, f := range globalFlags() {
				if own := flagNamed(cmd.Flags, f.Names()[0]); own != nil {
					shadowing[own] = true
					continue
				}
				cmd.Flags = append(cmd.Flags, f)
			}
		}
		addGlobalFlags(cmd.Subcommands)
	}
}

// shadowing holds the commands' own flags named as a global flag.
var shadowing = map[cli.Flag]bool{}

func flagNamed(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// lookup returns the context, closest first, in which a global flag was set
// (or the innermost, for its default).
func lookup(c *cli.Context, name string) *cli.Context {
	var innermost *cli.Context
	for _, ctx := range c.Lineage() {
		if ctx.Command != nil && shadowing[flagNamed(ctx.Command.Flags, name)] {
			continue // the command's own flag of that name
		}
		if innermost == nil {
			innermost = ctx
		}
		if ctx.IsSet(name) {
			return ctx
		}
	}
	if innermost == nil {
		return c
	}
	return innermost
}

func flagString(c *cli.Context, name string) string { return lookup(c, name).String(name) }

func newApp() *cli.App {
	app := newAppTree()
	addGlobalFlags(app.Commands)
	return app
}

func newAppTree() *cli.App {
	return &cli.App{
		Name:                 "leasehold",
		Usage:                "a highly available lease service for job execution",
		Version:              version,
		EnableBashCompletion: true,
		Flags:                withEnv(true),
		Commands: []*cli.Command{
			serverCommand(), devCommand(),
			clusterCommand(), snapshotCommand(),
			jobCommand(), leaseCommand(), workerCommand(), queueCommand(), eventsCommand(), benchCommand(),
			scheduleCommand(),
			tlsCommand(), superviseCommand(),
			{
				Name: "version", Usage: "print the version",
				Action: func(c *cli.Context) error {
					return output(c, map[string]string{"version": version, "commit": commit}, func() {
						fmt.Printf("leasehold %s (%s)\n", version, commit)
					})
				},
			},
			completionCommand(),
		},
	}
}

// newClient builds the API client from the global flags.
func newClient(c *cli.Context) (*client.Client, error) {
	if o := flagString(c, "output"); o != "table" && o != "json" {
		return nil, fmt.Errorf("--output %q: table or json", o)
	}
	cfg := client.Config{Endpoints: splitList(lookup(c, "endpoints").StringSlice("endpoints")), Token: flagString(c, "token")}
	if rules.CheckVersion("version", version) == nil {
		// What `worker run` registers with: this binary's version.
		cfg.WorkerVersion = version
	}
	if ca := flagString(c, "ca-file"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate", ca)
		}
		cfg.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	cert, key := flagString(c, "cert-file"), flagString(c, "key-file")
	if (cert == "") != (key == "") {
		return nil, errors.New("--cert-file and --key-file go together")
	}
	if cert != "" {
		if cfg.TLS == nil {
			// Mutual TLS with a server certificate the system trusts.
			cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--cert-file/--key-file: %w", err)
		}
		cfg.TLS.Certificates = []tls.Certificate{pair}
	}
	return client.New(cfg)
}

// withClient runs fn with a client and a context bounded by --timeout.
func withClient(fn func(ctx context.Context, c *cli.Context, cl *client.Client) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		cl, err := newClient(c)
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(c.Context, lookup(c, "timeout").Duration("timeout"))
		defer cancel()
		return fn(ctx, c, cl)
	}
}

// splitList accepts both repeated flags and comma-separated values.
func splitList(in []string) []string {
	var out []string
	for _, s := range in {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// oneLine makes an error one line, with the API's reason in front (main
// adds the "leasehold: " prefix once).
func oneLine(err error) string {
	var ce *client.Error
	msg := strings.ReplaceAll(err.Error(), "leasehold: ", "")
	if errors.As(err, &ce) && ce.Reason != "" {
		msg = ce.Reason + ": " + ce.Message
		if ce.Field != "" {
			msg += " (field " + ce.Field + ")"
		}
	}
	return strings.Join(strings.Fields(msg), " ")
}

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:  "completion",
		Usage: "print a shell completion script (bash or zsh)",
		Description: "  source <(leasehold completion bash)\n" +
			"leasehold answers --generate-bash-completion with the commands and flags that fit.",
		ArgsUsage: "bash|zsh",
		Action: func(c *cli.Context) error {
			switch c.Args().First() {
			case "bash":
				fmt.Print(bashCompletion)
			case "zsh":
				fmt.Print(zshCompletion)
			default:
				return fmt.Errorf("completion: bash or zsh")
			}
			return nil
		},
	}
}

const bashCompletion = `_leasehold() {
  local cur opts
  cur="${COMP_WORDS[COMP_CWORD]}"
  opts=$("${COMP_WORDS[0]}" "${COMP_WORDS[@]:1:$COMP_CWORD-1}" --generate-bash-completion 2>/dev/null)
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
}
complete -o default -F _leasehold leasehold
`

const zshCompletion = `#compdef leasehold
_leasehold() {
  local -a opts
  opts=("${(@f)$(${words[1]} ${words[@]:1:$CURRENT-2} --generate-bash-completion 2>/dev/null)}")
  _describe 'values' opts
}
compdef _leasehold leasehold
`
