package main

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// interspersed moves the flags a command's arguments are interleaved with
// ahead of its positional arguments, so `leasehold job get ID -o json`
// works like `leasehold job get -o json ID` (urfave/cli v2 stops reading
// flags at the first argument). Everything after "--" is left alone: it is
// the command `worker run` executes.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	flags, cmds := app.Flags, app.Commands
	i := 1
	// Walk down the command path; flags met on the way stay where they are.
	for i < len(args) {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if strings.HasPrefix(a, "-") {
			out = append(out, a)
			if takesValue(flags, a) && i+1 < len(args) {
				out = append(out, args[i+1])
				i++
			}
			i++
			continue
		}
		cmd := findCommand(cmds, a)
		if cmd == nil {
			break
		}
		out = append(out, a)
		flags, cmds = cmd.Flags, cmd.Subcommands
		i++
		if len(cmds) == 0 {
			break
		}
	}
	// The leaf: its flags first, then its positional arguments.
	var leafFlags, positional []string
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			leafFlags = append(leafFlags, a)
			if takesValue(flags, a) && i+1 < len(args) {
				leafFlags = append(leafFlags, args[i+1])
				i++
			}
			continue
		}
		positional = append(positional, a)
	}
	return append(append(out, leafFlags...), positional...)
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name || slices.Contains(c.Aliases, name) {
			return c
		}
	}
	return nil
}

// takesValue reports whether arg is a flag that needs the next argument as
// its value (not --flag=value, not a boolean).
func takesValue(flags []cli.Flag, arg string) bool {
	if strings.Contains(arg, "=") {
		return false
	}
	name := strings.TrimLeft(arg, "-")
	for _, f := range flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		_, isBool := f.(*cli.BoolFlag)
		return !isBool
	}
	return false
}
