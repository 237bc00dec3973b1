package remat_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/remat-dev/remat/internal/testinputs"
)

// A documented command: where it is shown, the command line as a user types
// it, and the output the documentation shows for it ("" when it shows none).
type docCommand struct {
	where, line, shown string
	// producer marks a Python command of a shell block that writes a file
	// (--out F) later commands of the documentation read: it runs only
	// when a command names F, and only with PyTorch installed.
	producer string
	// summary is prose that states numbers of the command's output: the
	// sentence after "`command`:" in running text.
	summary string
}

// commandStart matches the commands this test runs: the CLI (as `sim` or
// `go run ./cmd/sim`) and the module's other `go run` programs, optionally
// after environment assignments.
var commandStart = regexp.MustCompile(`^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:sim|go run \./\S+)(?:\s|$)`)

// pythonProducer matches a Python command that writes a file with --out.
var pythonProducer = regexp.MustCompile(`^(?:PYTHONPATH=\S+\s+)?(?:/usr/bin/)?python3\s.*--out\s+(\S+)`)

// notRunHere are documented commands this test does not run, each with the
// reason; everything else that matches commandStart runs.
var notRunHere = []struct{ prefix, why string }{
	{"go run ./examples/library", "TestREADMELibraryExample runs it and compares its output"},
}

// docFiles are the Markdown files whose commands run: README.md and docs/.
func docFiles(t *testing.T) []string {
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

var inlineCode = regexp.MustCompile("`([^`\n]+)`")

// markdownCommands returns the commands of one Markdown document: every
// line of a shell code block that starts a command, and every inline code
// span that is a command with at least one flag. A fenced block without
// an info string that follows a paragraph ending in ':' whose only command
// span is one command is that command's shown output.
func markdownCommands(path, doc string) []docCommand {
	var out []docCommand
	lines := strings.Split(doc, "\n")
	var para []string // the paragraph before the current line
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		trim := strings.TrimSpace(l)
		if strings.HasPrefix(trim, "```") {
			info := strings.TrimSpace(strings.TrimPrefix(trim, "```"))
			j := i + 1
			for j < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[j]), "```") {
				j++
			}
			body := lines[i+1 : min(j, len(lines))]
			switch info {
			case "sh", "bash", "shell", "console":
				for k, b := range body {
					b = strings.TrimPrefix(strings.TrimSpace(b), "$ ")
					where := fmt.Sprintf("%s:%d", path, i+2+k)
					if commandStart.MatchString(b) {
						out = append(out, docCommand{where: where, line: stripComment(b)})
					} else if m := pythonProducer.FindStringSubmatch(b); m != nil && !strings.HasPrefix(m[1], "docs/") {
						out = append(out, docCommand{where: where, line: stripComment(b), producer: m[1]})
					}
				}
			case "", "text":
				if cmd, ok := outputOf(para); ok {
					out = append(out, docCommand{where: fmt.Sprintf("%s:%d", path, i+1), line: cmd, shown: strings.Join(body, "\n") + "\n"})
				}
			}
			para = nil
			i = j
			continue
		}
		if trim == "" {
			para = nil
			continue
		}
		para = append(para, l)
		for _, m := range inlineCode.FindAllStringSubmatchIndex(l, -1) {
			c := l[m[2]:m[3]]
			if commandStart.MatchString(c) && strings.Contains(c, " --") && !isSynopsis(c) {
				dc := docCommand{where: fmt.Sprintf("%s:%d", path, i+1), line: c}
				if rest := l[m[1]:]; strings.HasPrefix(rest, ":") {
					dc.summary = sentence(rest[1:], lines[i+1:])
				}
				out = append(out, dc)
			}
		}
	}
	return out
}

// placeholder is an argument of a synopsis: an all-capitals word standing
// for what the user fills in (COMMAND, FILE, STEP.json), or an ellipsis.
var placeholder = regexp.MustCompile(`(^|\s)([A-Z][A-Z0-9_]*(\.[a-z]+)?|\.\.\.)(\s|$)`)

// isSynopsis reports whether an inline span shows a command's form rather
// than a command to run ("sim COMMAND --help", "sim ... --mirror").
func isSynopsis(c string) bool { return placeholder.MatchString(c) }

// outputOf reports the command whose output the next block shows: the
// paragraph ends with ':' and names exactly one command.
func outputOf(para []string) (string, bool) {
	if len(para) == 0 {
		return "", false
	}
	text := strings.Join(para, " ")
	if !strings.HasSuffix(strings.TrimSpace(text), ":") {
		return "", false
	}
	var cmds []string
	for _, m := range inlineCode.FindAllStringSubmatch(text, -1) {
		if commandStart.MatchString(m[1]) {
			cmds = append(cmds, m[1])
		}
	}
	if len(cmds) != 1 {
		return "", false
	}
	return cmds[0], true
}

// sentence returns the text from rest up to the end of its sentence (". "
// or the end of the paragraph), following the paragraph's next lines.
func sentence(rest string, next []string) string {
	text := rest
	for _, l := range next {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "```") {
			break
		}
		text += " " + strings.TrimSpace(l)
	}
	if i := strings.Index(text, ". "); i >= 0 {
		text = text[:i]
	}
	return strings.TrimSuffix(strings.TrimSpace(text), ".")
}

var number = regexp.MustCompile(`\d[\d,]*(\.\d+)?`)

// missingNumbers returns the numbers of summary that are not tokens of
// the output (thousands separators ignored).
func missingNumbers(summary, output string) []string {
	have := map[string]bool{}
	for _, n := range number.FindAllString(output, -1) {
		have[strings.ReplaceAll(n, ",", "")] = true
	}
	var miss []string
	summary = inlineCode.ReplaceAllString(summary, "")
	for _, m := range number.FindAllStringIndex(summary, -1) {
		if m[0] > 0 && unicode.IsLetter(rune(summary[m[0]-1])) {
			continue // part of a name (VGG19)
		}
		n := strings.TrimRight(summary[m[0]:m[1]], ",")
		if !have[strings.ReplaceAll(n, ",", "")] {
			miss = append(miss, n)
		}
	}
	return miss
}

func stripComment(l string) string {
	if i := strings.Index(l, "  #"); i >= 0 {
		l = l[:i]
	}
	return strings.TrimSpace(l)
}

// helpExamples returns the example lines of every subcommand's help.
func helpExamples(t *testing.T, sim string) []docCommand {
	out, err := exec.Command(sim, "--help").Output()
	if err != nil {
		t.Fatalf("sim --help: %v", err)
	}
	var subs []string
	inCmds := false
	for _, l := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(l, "Available Commands:"):
			inCmds = true
		case inCmds && strings.TrimSpace(l) == "":
			inCmds = false
		case inCmds:
			name := strings.Fields(l)[0]
			if name != "help" && name != "completion" {
				subs = append(subs, name)
			}
		}
	}
	var cmds []docCommand
	for _, s := range subs {
		h, err := exec.Command(sim, s, "--help").Output()
		if err != nil {
			t.Fatalf("sim %s --help: %v", s, err)
		}
		inEx := false
		for _, l := range strings.Split(string(h), "\n") {
			switch {
			case strings.HasPrefix(l, "Examples:"):
				inEx = true
			case inEx && strings.TrimSpace(l) == "":
				inEx = false
			case inEx:
				cmds = append(cmds, docCommand{where: "sim " + s + " --help", line: strings.TrimSpace(l)})
			}
		}
	}
	return cmds
}

const onnxFixture = "/usr/share/libonnx-testdata/data/pytorch-converted/test_Conv2d/model.onnx"

// docFixtures are the input files documented commands name, made in the
// directory the commands run in: graphs and models from the repository,
// and the DTR logs from ../shared/data when it is present.
func docFixtures(t *testing.T, dir string) (haveLogs bool) {
	example, err := os.ReadFile(filepath.Join("graph", "testdata", "example.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.json"), example, 0o644); err != nil {
		t.Fatal(err)
	}
	// A training export with a dynamic batch axis (the repository's).
	r18, err := os.ReadFile(filepath.Join("testdata", "onnx", "resnet18.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "resnet18.onnx"), r18, 0o644); err != nil {
		t.Fatal(err)
	}
	// An ONNX model exported from PyTorch (Debian's libonnx-testdata, which
	// CI installs); commands naming model.onnx skip without it.
	if b, err := os.ReadFile(onnxFixture); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "model.onnx"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logs := filepath.Join("..", "shared", "data", "dtr-logs")
	for _, name := range []string{"resnet32.log", "unet.log"} {
		b, err := os.ReadFile(filepath.Join(logs, name))
		if err != nil {
			return false
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "resnet32.log"))
	if err := os.WriteFile(filepath.Join(dir, "trace.log"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return true
}

// TestDocumentedCommands runs every command shown in README.md, docs/ and
// the CLI's help examples, in a scratch directory that holds the files they
// name, with the CLI built once; each must exit 0, and where the
// documentation shows a command's output, the program must print exactly
// that. Commands that need the DTR logs skip without them.
func TestDocumentedCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs every documented command (about a minute)")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH")
	}
	bin := t.TempDir()
	for _, p := range []string{"./cmd/sim", "./tools/fidelity"} {
		build := exec.Command(goTool, "build", "-o", bin, p)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", p, err, out)
		}
	}
	simBin := filepath.Join(bin, "sim")
	work := t.TempDir()
	haveLogs := docFixtures(t, work)

	var cmds []docCommand
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, markdownCommands(f, string(b))...)
	}
	cmds = append(cmds, helpExamples(t, simBin)...)
	if len(cmds) < 10 {
		t.Fatalf("found only %d documented commands: the extraction is broken", len(cmds))
	}
	repo, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	env := append(cleanEnv(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "REMAT_REPO="+repo,
		"PYTHONDONTWRITEBYTECODE=1") // the python/ and tools/ links lead into the tree
	producers := map[string]docCommand{}
	for _, c := range cmds {
		if c.producer != "" {
			producers[c.producer] = c
		}
	}
	haveTorch := exec.Command("/usr/bin/python3", "-c", "import torch, torchvision").Run() == nil
	testinputs.Track(t) // the commands run the python tools and the sim built from the tree
	for _, name := range []string{"tools", "python"} {
		if err := os.Symlink(filepath.Join(repo, name), filepath.Join(work, name)); err != nil {
			t.Fatal(err)
		}
	}
	produced := map[string]bool{}
	for _, c := range cmds {
		if c.producer != "" {
			continue
		}
		line := c.line
		skip := ""
		for _, n := range notRunHere {
			if strings.HasPrefix(line, n.prefix) {
				skip = n.why
			}
		}
		t.Run(c.where+": "+line, func(t *testing.T) {
			if skip != "" {
				t.Skip(skip)
			}
			if !haveLogs && strings.Contains(line, ".log") {
				t.Skip("needs the DTR logs of ../shared/data/dtr-logs")
			}
			if _, err := os.Stat(filepath.Join(work, "model.onnx")); err != nil && strings.Contains(line, "model.onnx") {
				t.Skip("needs " + onnxFixture + " (apt-get install libonnx-testdata)")
			}
			for _, f := range strings.Fields(line) {
				p, ok := producers[f]
				if !ok || produced[f] {
					continue
				}
				if !haveTorch {
					t.Skipf("needs %s, which %s makes with PyTorch (not installed)", f, p.where)
				}
				run := exec.Command("bash", "-c", p.line)
				run.Dir, run.Env = work, env
				if out, err := run.CombinedOutput(); err != nil {
					t.Fatalf("%s: %q (which makes %s) fails: %v\n%s", p.where, p.line, f, err, out)
				}
				produced[f] = true
			}
			shell := strings.NewReplacer("go run ./cmd/sim", "sim", "go run ./tools/fidelity", "fidelity").Replace(line)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", shell)
			cmd.Dir = work
			cmd.Env = env
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %q fails: %v\n%s", c.where, line, err, errb.String())
			}
			if miss := missingNumbers(c.summary, out.String()); len(miss) > 0 {
				t.Errorf("%s states %v for %q, which it does not print:\n%s", c.where, miss, line, out.String())
			}
			if c.shown != "" && out.String() != c.shown {
				t.Errorf("%s shows output of %q that the program does not print:\n--- shown\n%s--- printed\n%s", c.where, line, c.shown, out.String())
			}
		})
	}
}
