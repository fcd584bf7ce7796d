package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// Every flag of every command says what it is for, and its help line shows
// one default at most: a flag whose default the text gives itself ("default
// 3") must not also get urfave/cli's "(default: 0)".
func TestEveryFlagDescribed(t *testing.T) {
	app := newApp()
	var walk func(path string, flags []cli.Flag, cmds []*cli.Command)
	walk = func(path string, flags []cli.Flag, cmds []*cli.Command) {
		for _, f := range flags {
			checkFlag(t, path, f)
		}
		for _, c := range cmds {
			if c.Hidden || skipFlagsOf[c.Name] {
				continue
			}
			walk(path+" "+c.Name, c.Flags, c.Subcommands)
		}
	}
	walk("leasehold", app.Flags, app.Commands)
}

// skipFlagsOf: commands whose flags are not checked (none: server's and
// dev's are too).
var skipFlagsOf = map[string]bool{}

func checkFlag(t *testing.T, path string, f cli.Flag) {
	t.Helper()
	name := path + " --" + f.Names()[0]
	df, ok := f.(cli.DocGenerationFlag)
	if !ok {
		t.Errorf("%s: no usage to check (%T)", name, f)
		return
	}
	usage := df.GetUsage()
	if strings.TrimSpace(usage) == "" {
		t.Errorf("%s: no Usage", name)
	}
	line := fmt.Sprint(f)
	if n := strings.Count(line, "(default"); n > 1 {
		t.Errorf("%s: %d defaults in %q", name, n, line)
	}
	if strings.Contains(usage, "(default ") && strings.Contains(line, "(default: ") {
		t.Errorf("%s: its text gives a default and urfave/cli prints one too: %q", name, line)
	}
}
