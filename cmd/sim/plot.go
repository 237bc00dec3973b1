package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/remat-dev/remat/report"
)

// maxPlotPoints bounds the points of one line (timelines are downsampled by
// keeping the maximum of each bucket, so peaks survive).
const maxPlotPoints = 1500

// plotExts are the plot formats, chosen by the file's extension.
var plotExts = []string{".svg", ".png"}

// savePlot renders p into an output for path (its extension picks the
// format).
func savePlot(p *plot.Plot, path string) (output, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if !slices.Contains(plotExts, ext) {
		return output{}, usagef("--plot %q: expected a name ending in .svg or .png", path)
	}
	wt, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, ext[1:])
	if err != nil {
		return output{}, err
	}
	return render("--plot", path, func(w io.Writer) error { _, err := wt.WriteTo(w); return err })
}

// PlotTimeline draws allocated memory over time, one line per strategy that
// has a timeline, as SVG or PNG by the file's extension.
func PlotTimeline(r *report.Report, path string) (output, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s on %s: memory over one training step", r.Graph, orUnlimited(r.Device))
	p.X.Label.Text = "time (ms)"
	p.Y.Label.Text = "allocated (GiB)"
	p.Legend.Top = true
	i := 0
	for _, row := range r.Rows {
		if row.Result == nil || len(row.Result.Timeline) == 0 {
			continue
		}
		tl := row.Result.Timeline
		step := (len(tl) + maxPlotPoints - 1) / maxPlotPoints
		var xys plotter.XYs
		for s := 0; s < len(tl); s += step {
			e := min(s+step, len(tl))
			m := tl[s]
			for _, q := range tl[s:e] {
				if q.Allocated > m.Allocated {
					m = q
				}
			}
			xys = append(xys, plotter.XY{X: float64(tl[e-1].TimeNs) / 1e6, Y: float64(m.Allocated) / (1 << 30)})
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return output{}, fmt.Errorf("plot %s: %w", row.Strategy, err)
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / 7)
		p.Add(l)
		p.Legend.Add(row.Strategy, l)
		i++
	}
	if i == 0 {
		return output{}, fmt.Errorf("plot: no strategy has a memory timeline")
	}
	return savePlot(p, path)
}

// PlotSweep draws overhead against budget, one line per strategy (points
// where the strategy did not fit are left out), like the DTR paper's figure.
func PlotSweep(sw *report.Sweep, path string) (output, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s on %s: overhead vs memory budget", sw.Graph, orUnlimited(sw.Device))
	p.X.Label.Text = "budget (GiB)"
	p.Y.Label.Text = "step time / baseline"
	p.Legend.Top = true
	for i, s := range sw.Strategies {
		var xys plotter.XYs
		for j, b := range sw.Budgets {
			pt := sw.Points[j*len(sw.Strategies)+i]
			if pt.Status == report.StatusOK {
				xys = append(xys, plotter.XY{X: float64(b) / (1 << 30), Y: pt.Overhead})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return output{}, fmt.Errorf("plot %s: %w", s, err)
		}
		l.Color = plotutil.Color(i)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(s, l, pts)
	}
	return savePlot(p, path)
}

func orUnlimited(d string) string {
	if d == "" {
		return "an unlimited device"
	}
	return d
}
