package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Format is an output format of the what-if reports.
type Format string

// Output formats. Table and Markdown show human-readable sizes and times; CSV
// and JSON show exact integers.
const (
	FormatTable    Format = "table"
	FormatMarkdown Format = "markdown"
	FormatCSV      Format = "csv"
	FormatJSON     Format = "json"
)

// Formats lists the accepted format names.
var Formats = []Format{FormatTable, FormatMarkdown, FormatCSV, FormatJSON}

// ParseFormat validates a --format value.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("format %q: expected one of table, markdown, csv, json", s)
}

// Cell is one table cell: Human is shown in table and markdown output, Exact
// in CSV (exact integers, unrounded ratios). An empty Exact means Human.
type Cell struct {
	Human string
	Exact string
}

// Text returns a cell whose human and exact forms are the same.
func Text(s string) Cell { return Cell{Human: s} }

// Table is a titled grid of cells rendered in one of the text formats.
type Table struct {
	Columns []string
	// RightAlign marks numeric columns (right-aligned in table output).
	RightAlign []bool
	Rows       [][]Cell
}

// AddRow appends a row; it must have one cell per column.
func (t *Table) AddRow(cells ...Cell) { t.Rows = append(t.Rows, cells) }

// Write renders the table in format f (table, markdown or csv).
func (t *Table) Write(w io.Writer, f Format) error {
	switch f {
	case FormatTable:
		return t.writeText(w)
	case FormatMarkdown:
		return t.writeMarkdown(w)
	case FormatCSV:
		return t.writeCSV(w)
	}
	return fmt.Errorf("table: format %q is not a text table format (table, markdown, csv)", f)
}

func (t *Table) right(i int) bool { return i < len(t.RightAlign) && t.RightAlign[i] }

func (t *Table) writeText(w io.Writer) error {
	width := make([]int, len(t.Columns))
	for i, c := range t.Columns {
		width[i] = utf8.RuneCountInString(c)
	}
	for _, r := range t.Rows {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], utf8.RuneCountInString(c.Human))
			}
		}
	}
	var sb strings.Builder
	line := func(cells []string) {
		for i, c := range cells {
			if i > 0 {
				sb.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if t.right(i) {
				sb.WriteString(pad + c)
			} else if i == len(cells)-1 {
				sb.WriteString(c)
			} else {
				sb.WriteString(c + pad)
			}
		}
		sb.WriteByte('\n')
	}
	line(t.Columns)
	rule := make([]string, len(t.Columns))
	for i := range rule {
		rule[i] = strings.Repeat("-", width[i])
	}
	line(rule)
	for _, r := range t.Rows {
		cells := make([]string, len(t.Columns))
		for i := range cells {
			if i < len(r) {
				cells[i] = r[i].Human
			}
		}
		line(cells)
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

func (t *Table) writeMarkdown(w io.Writer) error {
	var sb strings.Builder
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	sb.WriteString("|")
	for _, c := range t.Columns {
		sb.WriteString(" " + esc(c) + " |")
	}
	sb.WriteString("\n|")
	for i := range t.Columns {
		if t.right(i) {
			sb.WriteString("---:|")
		} else {
			sb.WriteString("---|")
		}
	}
	sb.WriteByte('\n')
	for _, r := range t.Rows {
		sb.WriteString("|")
		for i := range t.Columns {
			c := ""
			if i < len(r) {
				c = r[i].Human
			}
			sb.WriteString(" " + esc(c) + " |")
		}
		sb.WriteByte('\n')
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

func (t *Table) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(t.Columns); err != nil {
		return err
	}
	for _, r := range t.Rows {
		rec := make([]string, len(t.Columns))
		for i := range rec {
			if i < len(r) {
				rec[i] = r[i].Exact
				if rec[i] == "" {
					rec[i] = r[i].Human
				}
			}
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
