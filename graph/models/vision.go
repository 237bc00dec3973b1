package models

import (
	"fmt"
	"strconv"

	"github.com/remat-dev/remat/graph"
)

func init() {
	imagenet := Options{Batch: 32, Image: 224, Classes: 1000}
	visionUses := []string{"Batch", "Image", "Classes"}
	for _, r := range []struct {
		depth  int
		blocks [4]int
		bottle bool
	}{
		{18, [4]int{2, 2, 2, 2}, false},
		{34, [4]int{3, 4, 6, 3}, false},
		{50, [4]int{3, 4, 6, 3}, true},
		{101, [4]int{3, 4, 23, 3}, true},
		{152, [4]int{3, 8, 36, 3}, true},
	} {
		r := r
		kind := "basic blocks"
		if r.bottle {
			kind = "bottleneck blocks (stride on the 3x3 conv, v1.5)"
		}
		register(&Spec{
			Name: "resnet" + strconv.Itoa(r.depth), Family: "resnet",
			Description: fmt.Sprintf("torchvision resnet%d for ImageNet: %v %s", r.depth, r.blocks, kind),
			Defaults:    imagenet, Uses: visionUses,
			build: func(b *graph.Builder, o Options) graph.TensorID { return resnetImageNet(b, o, r.blocks, r.bottle) },
		})
	}
	cifar := Options{Batch: 128, Image: 32, Classes: 10}
	for _, d := range []int{32, 1202} {
		d := d
		register(&Spec{
			Name: "resnet" + strconv.Itoa(d), Family: "resnet-cifar",
			Description: fmt.Sprintf("CIFAR ResNet-%d (He et al. 2016, sec. 4.2): 3 stages of %d basic blocks, 16/32/64 channels, option A shortcuts", d, (d-2)/6),
			Defaults:    cifar, Uses: visionUses,
			build: func(b *graph.Builder, o Options) graph.TensorID { return resnetCIFAR(b, o, d) },
		})
	}
	cifarD := cifar
	cifarD.Depth = 56
	register(&Spec{
		Name: "resnet-cifar", Family: "resnet-cifar",
		Description: "CIFAR ResNet of depth 6n+2 (option Depth), option A shortcuts",
		Defaults:    cifarD, Uses: []string{"Batch", "Image", "Depth", "Classes"},
		build: func(b *graph.Builder, o Options) graph.TensorID { return resnetCIFAR(b, o, o.Depth) },
		scale: []scaling{{"Depth", 8, 6}},
	})
	register(&Spec{
		Name: "vgg16", Family: "vgg", Description: "torchvision vgg16 (configuration D, no batch norm)",
		Defaults: imagenet, Uses: visionUses,
		build: func(b *graph.Builder, o Options) graph.TensorID { return vgg(b, o, vggD) },
	})
	register(&Spec{
		Name: "vgg19", Family: "vgg", Description: "torchvision vgg19 (configuration E, no batch norm)",
		Defaults: imagenet, Uses: visionUses,
		build: func(b *graph.Builder, o Options) graph.TensorID { return vgg(b, o, vggE) },
	})
	register(&Spec{
		Name: "densenet121", Family: "densenet",
		Description: "torchvision densenet121: growth 32, blocks (6, 12, 24, 16), bn_size 4, memory_efficient=False",
		Defaults:    imagenet, Uses: visionUses,
		build: densenet121,
	})
	register(&Spec{
		Name: "mobilenet_v2", Family: "mobilenet",
		Description: "torchvision mobilenet_v2 (width 1.0): inverted residuals with ReLU6 and depthwise convolutions",
		Defaults:    imagenet, Uses: visionUses,
		build: mobilenetV2,
	})
	register(&Spec{
		Name: "unet", Family: "unet",
		Description: "original U-Net (Ronneberger et al. 2015): unpadded 3x3 convs, 64..1024 channels, 2x2 up-convs, crop and concat; 572x572 in, 388x388 out",
		Defaults:    Options{Batch: 1, Image: 572, Classes: 2}, Uses: visionUses,
		build: unet,
	})
}

func image(b *graph.Builder, o Options, c int64) graph.TensorID {
	return b.Input("input", o.DType, int64(o.Batch), c, int64(o.Image), int64(o.Image))
}

// convBN adds conv (no bias) + batch norm named prefix+conv / prefix+bn.
func convBN(b *graph.Builder, conv, bn string, x graph.TensorID, out, k, stride, pad int, opts ...graph.ConvOption) graph.TensorID {
	x = b.Conv2d(conv, x, out, k, stride, pad, append(opts, graph.ConvNoBias())...)
	return b.BatchNorm2d(bn, x)
}

func channels(b *graph.Builder, x graph.TensorID) int {
	s := b.Shape(x)
	if len(s) < 2 {
		return 0
	}
	return int(s[1])
}

// resnetImageNet follows torchvision.models.resnet.
func resnetImageNet(b *graph.Builder, o Options, blocks [4]int, bottleneck bool) graph.TensorID {
	x := image(b, o, 3)
	x = convBN(b, "conv1", "bn1", x, 64, 7, 2, 3)
	x = b.ReLU("relu", x)
	x = b.MaxPool2d("maxpool", x, 3, 2, 1)
	expansion := 1
	if bottleneck {
		expansion = 4
	}
	in := 64
	for l, n := range blocks {
		planes := 64 << l
		for i := 0; i < n; i++ {
			stride := 1
			if i == 0 && l > 0 {
				stride = 2
			}
			p := "layer" + strconv.Itoa(l+1) + "." + strconv.Itoa(i)
			id := x
			if stride != 1 || in != planes*expansion {
				id = convBN(b, p+".downsample.0", p+".downsample.1", x, planes*expansion, 1, stride, 0)
			}
			if bottleneck {
				x = b.ReLU(p+".relu1", convBN(b, p+".conv1", p+".bn1", x, planes, 1, 1, 0))
				x = b.ReLU(p+".relu2", convBN(b, p+".conv2", p+".bn2", x, planes, 3, stride, 1))
				x = convBN(b, p+".conv3", p+".bn3", x, planes*4, 1, 1, 0)
			} else {
				x = b.ReLU(p+".relu1", convBN(b, p+".conv1", p+".bn1", x, planes, 3, stride, 1))
				x = convBN(b, p+".conv2", p+".bn2", x, planes, 3, 1, 1)
			}
			x = b.ReLU(p+".relu", b.Add(p+".add", x, id))
			in = planes * expansion
		}
	}
	x = b.AdaptiveAvgPool2d("avgpool", x, 1, 1)
	x = b.Flatten("flatten", x, 1)
	x = b.Linear("fc", x, o.Classes, true)
	return classLoss(b, x, o.Batch)
}

// resnetCIFAR follows He et al. 2016 section 4.2 with option A (parameter
// free) shortcuts as in the widely used PyTorch port: x[:, :, ::2, ::2]
// zero-padded by planes/4 channels on each side.
func resnetCIFAR(b *graph.Builder, o Options, depth int) graph.TensorID {
	if depth < 8 || (depth-2)%6 != 0 {
		b.Errorf("option Depth=%d: expected 6n+2 with n >= 1 (8, 14, 20, 32, 56, 110, 1202, ...)", depth)
		return graph.NoTensor
	}
	n := (depth - 2) / 6
	x := image(b, o, 3)
	x = b.ReLU("relu", convBN(b, "conv1", "bn1", x, 16, 3, 1, 1))
	in := 16
	for l := 0; l < 3; l++ {
		planes := 16 << l
		for i := 0; i < n; i++ {
			stride := 1
			if i == 0 && l > 0 {
				stride = 2
			}
			p := "layer" + strconv.Itoa(l+1) + "." + strconv.Itoa(i)
			id := x
			if stride != 1 || in != planes {
				s := b.Shape(x)
				if len(s) == 4 {
					id = b.Slice(p+".shortcut.h", x, 2, 0, int(s[2]), 2)
					id = b.Slice(p+".shortcut.w", id, 3, 0, int(s[3]), 2)
					id = b.Pad(p+".shortcut.pad", id, 0, 0, 0, 0, planes/4, planes/4)
				}
			}
			x = b.ReLU(p+".relu1", convBN(b, p+".conv1", p+".bn1", x, planes, 3, stride, 1))
			x = convBN(b, p+".conv2", p+".bn2", x, planes, 3, 1, 1)
			x = b.ReLU(p+".relu", b.Add(p+".add", x, id))
			in = planes
		}
	}
	x = b.AdaptiveAvgPool2d("avgpool", x, 1, 1)
	x = b.Flatten("flatten", x, 1)
	x = b.Linear("linear", x, o.Classes, true)
	return classLoss(b, x, o.Batch)
}

// VGG configurations (torchvision cfgs "D" and "E"); 0 is a max pool.
var (
	vggD = []int{64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0}
	vggE = []int{64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0}
)

func vgg(b *graph.Builder, o Options, cfg []int) graph.TensorID {
	x := image(b, o, 3)
	idx := 0
	name := func() string { s := "features." + strconv.Itoa(idx); idx++; return s }
	for _, c := range cfg {
		if c == 0 {
			x = b.MaxPool2d(name(), x, 2, 2, 0)
			continue
		}
		x = b.Conv2d(name(), x, c, 3, 1, 1)
		x = b.ReLU(name(), x)
	}
	x = b.AdaptiveAvgPool2d("avgpool", x, 7, 7)
	x = b.Flatten("flatten", x, 1)
	x = b.ReLU("classifier.1", b.Linear("classifier.0", x, 4096, true))
	x = b.Dropout("classifier.2", x, 0.5)
	x = b.ReLU("classifier.4", b.Linear("classifier.3", x, 4096, true))
	x = b.Dropout("classifier.5", x, 0.5)
	x = b.Linear("classifier.6", x, o.Classes, true)
	return classLoss(b, x, o.Batch)
}

// densenet121 follows torchvision.models.densenet (memory_efficient=False):
// every dense layer concatenates all earlier features of its block.
func densenet121(b *graph.Builder, o Options) graph.TensorID {
	const growth, bnSize = 32, 4
	x := image(b, o, 3)
	x = convBN(b, "features.conv0", "features.norm0", x, 64, 7, 2, 3)
	x = b.ReLU("features.relu0", x)
	x = b.MaxPool2d("features.pool0", x, 3, 2, 1)
	for bi, n := range []int{6, 12, 24, 16} {
		bp := "features.denseblock" + strconv.Itoa(bi+1)
		feats := []graph.TensorID{x}
		for li := 0; li < n; li++ {
			p := bp + ".denselayer" + strconv.Itoa(li+1)
			h := b.Concat(p+".cat", 1, feats...)
			h = b.ReLU(p+".relu1", b.BatchNorm2d(p+".norm1", h))
			h = b.Conv2d(p+".conv1", h, bnSize*growth, 1, 1, 0, graph.ConvNoBias())
			h = b.ReLU(p+".relu2", b.BatchNorm2d(p+".norm2", h))
			h = b.Conv2d(p+".conv2", h, growth, 3, 1, 1, graph.ConvNoBias())
			feats = append(feats, h)
		}
		x = b.Concat(bp+".cat", 1, feats...)
		if bi < 3 {
			tp := "features.transition" + strconv.Itoa(bi+1)
			x = b.ReLU(tp+".relu", b.BatchNorm2d(tp+".norm", x))
			x = b.Conv2d(tp+".conv", x, channels(b, x)/2, 1, 1, 0, graph.ConvNoBias())
			x = b.AvgPool2d(tp+".pool", x, 2, 2, 0)
		}
	}
	x = b.ReLU("relu", b.BatchNorm2d("features.norm5", x))
	x = b.AdaptiveAvgPool2d("avgpool", x, 1, 1)
	x = b.Flatten("flatten", x, 1)
	x = b.Linear("classifier", x, o.Classes, true)
	return classLoss(b, x, o.Batch)
}

// mobilenetV2 follows torchvision.models.mobilenetv2 at width 1.0 (where
// _make_divisible leaves every channel count unchanged).
func mobilenetV2(b *graph.Builder, o Options) graph.TensorID {
	x := image(b, o, 3)
	cbr := func(p string, x graph.TensorID, out, k, stride int, opts ...graph.ConvOption) graph.TensorID {
		x = convBN(b, p+".0", p+".1", x, out, k, stride, (k-1)/2, opts...)
		return b.ReLU6(p+".2", x)
	}
	x = cbr("features.0", x, 32, 3, 2)
	in, f := 32, 1
	for _, s := range [][4]int{{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}} {
		t, c, n, st := s[0], s[1], s[2], s[3]
		for i := 0; i < n; i++ {
			stride := 1
			if i == 0 {
				stride = st
			}
			p := "features." + strconv.Itoa(f) + ".conv"
			hidden := in * t
			h, k := x, 0
			if t != 1 {
				h = cbr(p+".0", h, hidden, 1, 1)
				k = 1
			}
			h = cbr(p+"."+strconv.Itoa(k), h, hidden, 3, stride, graph.ConvGroups(hidden))
			h = convBN(b, p+"."+strconv.Itoa(k+1), p+"."+strconv.Itoa(k+2), h, c, 1, 1, 0)
			if stride == 1 && in == c {
				h = b.Add("features."+strconv.Itoa(f)+".add", x, h)
			}
			x, in = h, c
			f++
		}
	}
	x = cbr("features."+strconv.Itoa(f), x, 1280, 1, 1)
	x = b.AdaptiveAvgPool2d("avgpool", x, 1, 1)
	x = b.Flatten("flatten", x, 1)
	x = b.Dropout("classifier.0", x, 0.2)
	x = b.Linear("classifier.1", x, o.Classes, true)
	return classLoss(b, x, o.Batch)
}

// unet is the original U-Net (Ronneberger, Fischer, Brox 2015, fig. 1):
// unpadded convolutions, so the output is smaller than the input and skip
// connections are center-cropped before concatenation. The loss is a
// per-pixel cross entropy over the output map.
func unet(b *graph.Builder, o Options) graph.TensorID {
	x := image(b, o, 1)
	double := func(p string, x graph.TensorID, c int) graph.TensorID {
		x = b.ReLU(p+".relu1", b.Conv2d(p+".conv1", x, c, 3, 1, 0))
		return b.ReLU(p+".relu2", b.Conv2d(p+".conv2", x, c, 3, 1, 0))
	}
	var skips []graph.TensorID
	for i, c := range []int{64, 128, 256, 512} {
		p := "down" + strconv.Itoa(i+1)
		x = double(p, x, c)
		skips = append(skips, x)
		x = b.MaxPool2d(p+".pool", x, 2, 2, 0)
	}
	x = double("bottom", x, 1024)
	for i, c := range []int{512, 256, 128, 64} {
		p := "up" + strconv.Itoa(i+1)
		x = b.ConvTranspose2d(p+".upconv", x, c, 2, 2, 0)
		skip := skips[len(skips)-1-i]
		ss, xs := b.Shape(skip), b.Shape(x)
		if len(ss) != 4 || len(xs) != 4 {
			return graph.NoTensor
		}
		if ss[2] < xs[2] || ss[3] < xs[3] {
			b.Errorf("option Image=%d: skip connection %s is %dx%d, smaller than the upsampled %dx%d; expected an input size that keeps every level's size valid (e.g. 572)", o.Image, p, ss[2], ss[3], xs[2], xs[3])
			return graph.NoTensor
		}
		oh, ow := int((ss[2]-xs[2])/2), int((ss[3]-xs[3])/2)
		crop := b.Slice(p+".crop.h", skip, 2, oh, oh+int(xs[2]), 1)
		crop = b.Slice(p+".crop.w", crop, 3, ow, ow+int(xs[3]), 1)
		x = b.Concat(p+".cat", 1, crop, x)
		x = double(p, x, c)
	}
	x = b.Conv2d("final", x, o.Classes, 1, 1, 0)
	s := b.Shape(x)
	if len(s) != 4 {
		return graph.NoTensor
	}
	labels := b.Input("labels", graph.I64, s[0], s[2], s[3])
	return b.CrossEntropy("loss", x, labels)
}
