package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testbin"
)

// The README's tour, from "## A five-minute tour" up to the next section
// of that level, is run as written: every ```sh block in it, command by
// command, in order, each in `sh -c` with $leasehold set to the binary
// under test, in one scratch directory, against `leasehold dev`. The
// README marks what is not a plain command in a trailing comment:
//
//	# (another terminal)  the command keeps running (a worker, a stream):
//	                      it is started in the background and stopped
//	                      when the test ends;
//	# (exit N)            the command is meant to exit with status N.
//
// Every other command must exit 0. A command spans lines while a quote is
// open or a line ends in a backslash. The tour's first command must be
// `leasehold=./bin/leasehold`, the variable the test substitutes.
//
// Not parallel, like TestDevCluster (top-level tests without t.Parallel
// never overlap): it needs dev's fixed ports 7701-7703 and 7711-7713, and
// is skipped if anything holds one.
func TestReadmeTour(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := tourCommands(string(readme))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if len(cmds) == 0 || cmds[0].text != "leasehold=./bin/leasehold" {
		t.Fatalf("README.md: the tour must start with leasehold=./bin/leasehold; it starts with %+v", cmds[:min(1, len(cmds))])
	}
	cmds = cmds[1:]

	bin := testbin.Leasehold(t)
	skipUnlessDevPortsFree(t)
	// The workers' state directories, not under t.TempDir: a command's
	// supervisor may still write there for a moment after its worker
	// stopped, which would fail the test's own cleanup.
	state, err := os.MkdirTemp("", "leasehold-tour-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	work := t.TempDir() // the tour's files (build.json)
	env := append(baseEnv(), "XDG_STATE_HOME="+state)

	startDev(t, env, filepath.Join(t.TempDir(), "dev"))

	prelude := "cd " + shellQuote(work) + " && leasehold=" + shellQuote(bin) + " && "
	var background []*proc
	for _, c := range cmds {
		t.Logf("README.md line %d (background %v, exit %d): %s", c.line, c.background, c.exit, c.text)
		script := c.text
		if strings.HasPrefix(script, "$leasehold ") {
			// The signal that stops it, or kills it past its bound,
			// reaches leasehold, not a shell that would leave it running.
			script = "exec " + script
		}
		if c.background {
			background = append(background, testbin.Start(t, fmt.Sprintf("README line %d", c.line), workerGrace, env, "sh", "-c", prelude+script))
			continue
		}
		r := testbin.Run(t, cliBound, env, "sh", "-c", prelude+script)
		if r.Code != c.exit {
			t.Fatalf("README.md line %d: exit %d, want %d:\n%s\n--- stdout:\n%s--- stderr:\n%s", c.line, r.Code, c.exit, c.text, tail(r.Stdout), tail(r.Stderr))
		}
	}
	for _, p := range background {
		if p.Exited() {
			t.Errorf("a command for another terminal exited early (%s):\n%s", p.State(), tail(p.Stderr()))
		}
	}
}

// tourCommand is one command of the README's tour.
type tourCommand struct {
	line       int    // where it starts in README.md, from 1
	text       string // the command's lines as written, comments included
	background bool   // marked (another terminal)
	exit       int    // the exit status it is meant to have
}

var exitMarker = regexp.MustCompile(`\(exit (\d+)\)`)

// tourCommands returns the commands of every ```sh block between "## A
// five-minute tour" and the next "## " heading.
func tourCommands(readme string) ([]tourCommand, error) {
	start := strings.Index(readme, "\n## A five-minute tour\n")
	if start < 0 {
		return nil, fmt.Errorf("no section \"## A five-minute tour\"")
	}
	end := strings.Index(readme[start+1:], "\n## ")
	if end < 0 {
		end = len(readme) - start - 1
	}
	firstLine := strings.Count(readme[:start+1], "\n") + 1
	lines := strings.Split(readme[start+1:start+1+end], "\n")

	var cmds []tourCommand
	var cur *tourCommand
	var comments []string
	inBlock := false
	for i, l := range lines {
		n := firstLine + i
		switch {
		case !inBlock && l == "```sh":
			inBlock = true
			continue
		case !inBlock:
			continue
		case cur == nil && l == "```":
			inBlock = false
			continue
		}
		if cur == nil {
			if trimmed := strings.TrimSpace(l); trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			cur = &tourCommand{line: n}
			comments = nil
		} else {
			cur.text += "\n"
		}
		cur.text += l
		complete, comment := scanShell(cur.text)
		if comment != "" {
			comments = append(comments, comment)
		}
		if !complete {
			if l == "```" {
				return nil, fmt.Errorf("line %d: the command from line %d is not closed", n, cur.line)
			}
			continue
		}
		for _, c := range comments {
			if strings.Contains(c, "(another terminal)") {
				cur.background = true
			}
			if m := exitMarker.FindStringSubmatch(c); m != nil {
				cur.exit, _ = strconv.Atoi(m[1])
			}
		}
		cmds = append(cmds, *cur)
		cur = nil
	}
	if inBlock {
		return nil, fmt.Errorf("a ```sh block is not closed")
	}
	return cmds, nil
}

// scanShell reads src as sh does, far enough to tell whether it is a
// complete command (no quote open, no trailing backslash) and to find the
// comment on its last line, if any.
func scanShell(src string) (complete bool, comment string) {
	var quote byte // 0, '\'' or '"'
	escaped := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case escaped:
			escaped = false
		case quote == '\'':
			if c == '\'' {
				quote = 0
			}
		case c == '\\':
			escaped = true
		case quote == '"':
			if c == '"' {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || src[i-1] == ' ' || src[i-1] == '\t' || src[i-1] == '\n'):
			nl := strings.IndexByte(src[i:], '\n')
			if nl < 0 {
				return true, src[i:]
			}
			i += nl - 1 // a comment ends at its line's end
		}
	}
	return quote == 0 && !escaped, ""
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// The parser finds the marks in comments, keeps quoted lines together, and
// is not fooled by a quote or a # in a comment or inside quotes.
func TestTourCommands(t *testing.T) {
	readme := "intro\n```sh\nnot the tour\n```\n## A five-minute tour\n\n```sh\n" +
		"leasehold=./bin/leasehold\n" +
		"# a comment line, it's skipped\n" +
		"$leasehold a 'x # y'              # it's one (exit 3)\n" +
		"$leasehold b -- sh -c 'one;\n    two'    # (another terminal)\n" +
		"$leasehold c \\\n    --d\n" +
		"```\n\n```go\nnot sh\n```\n## Next\n```sh\nnot the tour either\n```\n"
	got, err := tourCommands(readme)
	if err != nil {
		t.Fatal(err)
	}
	want := []tourCommand{
		{line: 8, text: "leasehold=./bin/leasehold"},
		{line: 10, text: "$leasehold a 'x # y'              # it's one (exit 3)", exit: 3},
		{line: 11, text: "$leasehold b -- sh -c 'one;\n    two'    # (another terminal)", background: true},
		{line: 13, text: "$leasehold c \\\n    --d"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if _, err := tourCommands("x\n## A five-minute tour\n```sh\n$leasehold 'open\n```\n"); err == nil {
		t.Error("an unclosed quote: no error")
	}
}
