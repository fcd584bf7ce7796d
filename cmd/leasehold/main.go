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
	err := unknownCommand(app, os.Args)
	if err == nil {
		err = app.Run(interspersed(app, os.Args))
	}
	if err != nil {
		if msg := oneLine(err); msg != "" {
			fmt.Fprintln(os.Stderr, "leasehold: "+msg)
		}
		os.Exit(exitCode(err))
	}
}

// exitCode is 2 for a command used wrongly (errUsage), the code a command
// chose with cli.Exit (3 for `lease check` of a token that is not current;
// worker run --once's outcome), 1 for any other failure.
func exitCode(err error) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) && ec.ExitCode() != 0 {
		return ec.ExitCode()
	}
	return 1
}

// cmdUsageError is a command used wrongly: exit status 2, one line naming the
// command and where its help is.
type cmdUsageError struct{ msg string }

func (e *cmdUsageError) Error() string        { return e.msg }
func (e *cmdUsageError) Is(target error) bool { return target == errUsage }

// usageOf is a usage error of the command c runs.
func usageOf(c *cli.Context, format string, args ...any) error {
	name := "leasehold"
	if c != nil && c.Command != nil && c.Command.HelpName != "" {
		name = c.Command.HelpName
	}
	msg := fmt.Sprintf(format, args...)
	if cmd := strings.TrimPrefix(name, "leasehold"); cmd != "" {
		msg = strings.TrimSpace(cmd) + ": " + msg
	}
	return &cmdUsageError{msg: msg + " (see " + name + " --help)"}
}

// onUsageError replaces urfave/cli's whole help followed by the error with
// one line (main prints it) and exit status 2.
func onUsageError(c *cli.Context, err error, _ bool) error {
	return usageOf(c, "%s", err.Error())
}

// quietUsage gives every command onUsageError, and makes a command's
// missing required flag a usage error too (urfave/cli would print the
// whole help before it).
func quietUsage(cmds []*cli.Command) {
	for _, cmd := range cmds {
		if cmd.OnUsageError == nil {
			cmd.OnUsageError = onUsageError
		}
		var required []string
		for _, f := range cmd.Flags {
			switch f := f.(type) {
			case *cli.StringFlag:
				if f.Required {
					f.Required, required = false, append(required, f.Name)
				}
			case *cli.UintFlag:
				if f.Required {
					f.Required, required = false, append(required, f.Name)
				}
			}
		}
		if action := cmd.Action; len(required) > 0 && action != nil {
			cmd.Action = func(c *cli.Context) error {
				for _, name := range required {
					if !c.IsSet(name) {
						return usageOf(c, "flag --%s is required", name)
					}
				}
				return action(c)
			}
		}
		quietUsage(cmd.Subcommands)
	}
}

// unknownCommand finds, before the app runs, a command name that is not
// one: urfave/cli would print a help topic error and exit 3, the status
// that means a fence check that is not current.
func unknownCommand(app *cli.App, args []string) error {
	flags, cmds, path := app.Flags, app.Commands, "leasehold"
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "--generate-bash-completion" {
			return nil
		}
		if strings.HasPrefix(a, "-") {
			if takesValue(flags, a) {
				i++
			}
			continue
		}
		if a == "help" || a == "h" {
			continue // help TOPIC: the topic must be a command too
		}
		cmd := findCommand(cmds, a)
		if cmd == nil {
			if len(cmds) == 0 {
				return nil // a positional argument
			}
			msg := "unknown command " + a
			if near := nearestCommand(cmds, a); near != "" {
				msg += " (did you mean " + near + "?)"
			}
			if path != "leasehold" {
				msg = strings.TrimPrefix(path, "leasehold ") + ": " + msg
			}
			return &cmdUsageError{msg: msg + " (see " + path + " --help)"}
		}
		flags, cmds, path = cmd.Flags, cmd.Subcommands, path+" "+cmd.Name
		if len(cmds) == 0 {
			return nil
		}
	}
	return nil
}

// nearestCommand is the visible command whose name is closest to name (an
// edit or two away, or name a prefix of it), or "".
func nearestCommand(cmds []*cli.Command, name string) string {
	best, bestD := "", 3
	for _, c := range cmds {
		if c.Hidden {
			continue
		}
		d := editDistance(name, c.Name)
		if strings.HasPrefix(c.Name, name) || strings.HasPrefix(name, c.Name) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = c.Name, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
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
			Value: cli.NewStringSlice(client.DefaultEndpoints()...), Usage: "API addresses of the cluster (repeat or comma-separate)"},
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
	addQuiet(app)
	noStrayArgs(app.Commands)
	quietUsage(app.Commands)
	app.OnUsageError = onUsageError
	// main prints the error and chooses the exit status, never urfave/cli.
	app.ExitErrHandler = func(*cli.Context, error) {}
	return app
}

// noStrayArgs makes every command that names no arguments (no ArgsUsage)
// refuse one as a usage error, before it does anything: `job purge --queue
// q deadA` must not purge all of q's dead jobs while ignoring deadA.
func noStrayArgs(cmds []*cli.Command) {
	for _, cmd := range cmds {
		noStrayArgs(cmd.Subcommands)
		if cmd.ArgsUsage != "" || cmd.Action == nil {
			continue
		}
		action := cmd.Action
		cmd.Action = func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usageOf(c, "unexpected argument %q (this command takes only flags)", c.Args().First())
			}
			return action(c)
		}
	}
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
		return nil, usageOf(c, "--output %q: table or json", o)
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
		// The server words its messages after its sentinels ("not found:
		// job X"): the reason in front says that already.
		m := ce.Message
		if said := strings.ToLower(strings.ReplaceAll(ce.Reason, "_", " ")) + ": "; strings.HasPrefix(strings.ToLower(m), said) {
			m = m[len(said):]
		}
		msg = ce.Reason + ": " + m
		if ce.Field != "" {
			msg += " (field " + ce.Field + ")"
		}
	}
	return strings.Join(strings.Fields(msg), " ")
}

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:  "completion",
		Usage: "print a shell completion script (bash, zsh or fish)",
		Description: "  source <(leasehold completion bash)\n" +
			"  leasehold completion zsh > \"${fpath[1]}/_leasehold\"\n" +
			"  leasehold completion fish > ~/.config/fish/completions/leasehold.fish\n" +
			"bash and zsh ask leasehold --generate-bash-completion for the commands and flags that fit;\n" +
			"fish's script lists them.",
		ArgsUsage: "bash|zsh|fish",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageOf(c, "one shell: bash, zsh or fish")
			}
			switch c.Args().First() {
			case "bash":
				fmt.Fprint(c.App.Writer, bashCompletion)
			case "zsh":
				fmt.Fprint(c.App.Writer, zshCompletion)
			case "fish":
				script, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				fmt.Fprint(c.App.Writer, script)
			default:
				return usageOf(c, "shell %q: bash, zsh or fish", c.Args().First())
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
