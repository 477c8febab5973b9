//! The workload of the `training_loop` example: everything but the profiling.
//!
//! It is shaped like an ML training job and does all of its maths by
//! hand, on one CPU core, with no dependencies beyond `tracing`:
//!
//! * a deterministic synthetic data set: 10 classes of noisy 64-dimensional
//!   "sensor readings" produced by a fixed non-linear map from a 16-dimensional
//!   latent space, with per-feature units (offsets and scales), a little label
//!   noise, and a few corrupted (NaN) training rows;
//! * a multi-layer perceptron 64 → 256 → 128 → 10 with ReLU activations and a
//!   softmax cross-entropy loss, trained with Adam and a cosine learning-rate
//!   schedule;
//! * per epoch: shuffle, one `train_step` per mini-batch, then an `evaluate`
//!   pass over a held-out test set. Loss goes down and accuracy goes up; `main.rs`
//!   prints one line per epoch to stdout.
//!
//! Instrumentation uses only `#[tracing::instrument]`, spans, and a few events with
//! metric fields named by the `tracing-opentelemetry` convention, and knows nothing
//! of spanprof. Each `train_step` emits `histogram.loss`, `monotonic_counter.samples`
//! and `gauge.learning_rate`; each `evaluate`, `gauge.test_accuracy_ratio`. The span
//! tree is (`train` is in `main.rs`, the rest here)
//!
//! ```text
//! generate_dataset          info   items
//! train                     info   epochs, items
//! └─ epoch                  info   epoch
//!    ├─ shuffle             info   items
//!    ├─ train_step          info   step, items            (one per mini-batch)
//!    │  ├─ load_batch       info   items, bytes           (gather + normalise + simulated I/O wait)
//!    │  ├─ validate_batch   info   items                  (#[instrument(err)]: fails on corrupted rows)
//!    │  ├─ forward          info   flops
//!    │  │  └─ linear        debug  layer, fan_in, fan_out (long-lived, entered on every pass)
//!    │  ├─ loss             info   items
//!    │  ├─ backward         info   flops
//!    │  └─ optimizer_step   info   params
//!    └─ evaluate            info   epoch, items
//!       ├─ forward          info   flops
//!       │  └─ linear        debug  layer, fan_in, fan_out
//!       └─ loss             info   items
//! ```
//!
//! `validate_batch` rejects the few batches that contain a corrupted row (about
//! one step in 50), which shows up as errors in the profile; the step is skipped.
//!
//! Each `linear` span is created once, when the model is built, stored in the
//! layer, and entered on every forward pass (`let _entered = self.span.enter()`),
//! the way `candle-transformers` instruments its layers. The spans are `debug`
//! level, so they only exist when the log filter allows it (e.g.
//! `RUST_LOG=debug`).

use std::error::Error;
use std::f32::consts::PI;
use std::fmt;
use std::time::{Duration, Instant};

use tracing::{instrument, Span};

/// Number of input features per sample.
const FEATURES: usize = 64;
/// Number of classes.
const CLASSES: usize = 10;
/// Dimension of the latent space the data is generated from.
const LATENT: usize = 16;
/// Gaussian blobs (in latent space) per class.
const BLOBS_PER_CLASS: usize = 4;
/// Layer widths of the MLP, input first.
const LAYER_SIZES: [usize; 4] = [FEATURES, 256, 128, CLASSES];

const TRAIN_SAMPLES: usize = 16384;
const TEST_SAMPLES: usize = 4096;
/// Training rows whose readings contain a NaN; `validate_batch` rejects the
/// batches they land in.
const CORRUPTED_SAMPLES: usize = 5;
/// Fraction of labels replaced by a random class.
const LABEL_NOISE: f32 = 0.03;

const BATCH_SIZE: usize = 64;
const EVAL_BATCH_SIZE: usize = 256;
const LEARNING_RATE: f32 = 3e-4;
/// Simulated latency of fetching one mini-batch from storage.
const IO_LATENCY: Duration = Duration::from_micros(40);
const SEED: u64 = 0x5EED_2024;

// ---------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------

/// SplitMix64: tiny, fast, and plenty good for synthetic data.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Standard normal, by the Box–Muller transform.
    fn normal(&mut self) -> f32 {
        let radius = (-2.0 * (1.0 - self.uniform()).ln()).sqrt();
        radius * (2.0 * PI * self.uniform()).cos()
    }

    /// Fisher–Yates shuffle.
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

// ---------------------------------------------------------------------------
// Dense matrices and kernels
// ---------------------------------------------------------------------------

/// A row-major `rows × cols` matrix of `f32`.
#[derive(Clone)]
struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<f32>,
}

impl Matrix {
    fn zeros(rows: usize, cols: usize) -> Self {
        Matrix {
            rows,
            cols,
            data: vec![0.0; rows * cols],
        }
    }

    fn random_normal(rows: usize, cols: usize, std_dev: f32, rng: &mut Rng) -> Self {
        let data = (0..rows * cols).map(|_| std_dev * rng.normal()).collect();
        Matrix { rows, cols, data }
    }

    fn row_iter(&self) -> std::slice::ChunksExact<'_, f32> {
        self.data.chunks_exact(self.cols)
    }

    fn row_iter_mut(&mut self) -> std::slice::ChunksExactMut<'_, f32> {
        self.data.chunks_exact_mut(self.cols)
    }
}

/// `x · w + bias` for `x: n × k`, `w: k × m`, broadcasting `bias` over rows.
fn matmul_bias(x: &Matrix, w: &Matrix, bias: &[f32]) -> Matrix {
    assert_eq!(x.cols, w.rows);
    let mut out = Matrix::zeros(x.rows, w.cols);
    for (x_row, out_row) in x.row_iter().zip(out.row_iter_mut()) {
        out_row.copy_from_slice(bias);
        for (&x_ik, w_row) in x_row.iter().zip(w.row_iter()) {
            axpy(x_ik, w_row, out_row);
        }
    }
    out
}

/// `aᵀ · b` for `a: n × k`, `b: n × m` (weight gradients).
fn matmul_tn(a: &Matrix, b: &Matrix) -> Matrix {
    assert_eq!(a.rows, b.rows);
    let mut out = Matrix::zeros(a.cols, b.cols);
    for (a_row, b_row) in a.row_iter().zip(b.row_iter()) {
        for (&a_ik, out_row) in a_row.iter().zip(out.row_iter_mut()) {
            axpy(a_ik, b_row, out_row);
        }
    }
    out
}

/// `a · bᵀ` for `a: n × m`, `b: k × m` (input gradients).
fn matmul_nt(a: &Matrix, b: &Matrix) -> Matrix {
    assert_eq!(a.cols, b.cols);
    let mut out = Matrix::zeros(a.rows, b.rows);
    for (a_row, out_row) in a.row_iter().zip(out.row_iter_mut()) {
        for (out_ij, b_row) in out_row.iter_mut().zip(b.row_iter()) {
            *out_ij = dot(a_row, b_row);
        }
    }
    out
}

/// `y += alpha * x`.
fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (y_i, &x_i) in y.iter_mut().zip(x) {
        *y_i += alpha * x_i;
    }
}

/// Dot product with eight independent accumulators, so that it vectorises.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut acc = [0.0f32; LANES];
    for (a_chunk, b_chunk) in a_chunks.zip(b_chunks) {
        for ((acc_i, &x), &y) in acc.iter_mut().zip(a_chunk).zip(b_chunk) {
            *acc_i += x * y;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Column sums of `m` (bias gradients).
fn column_sums(m: &Matrix) -> Vec<f32> {
    let mut sums = vec![0.0; m.cols];
    for row in m.row_iter() {
        axpy(1.0, row, &mut sums);
    }
    sums
}

fn relu_in_place(m: &mut Matrix) {
    for v in &mut m.data {
        *v = v.max(0.0);
    }
}

/// Multiplies `grad` by ReLU's derivative, given the ReLU's output.
fn relu_backward(grad: &mut Matrix, relu_output: &Matrix) {
    for (g, &a) in grad.data.iter_mut().zip(&relu_output.data) {
        if a <= 0.0 {
            *g = 0.0;
        }
    }
}

// ---------------------------------------------------------------------------
// Data
// ---------------------------------------------------------------------------

/// Samples as rows of a `len × FEATURES` matrix, with their class labels.
struct Dataset {
    features: Matrix,
    labels: Vec<u8>,
}

/// A mini-batch ready for the model.
struct Batch {
    inputs: Matrix,
    labels: Vec<u8>,
}

impl Dataset {
    /// Bytes of storage per sample: the features plus the label.
    const BYTES_PER_SAMPLE: usize = FEATURES * std::mem::size_of::<f32>() + 1;

    fn len(&self) -> usize {
        self.labels.len()
    }

    /// Copies the given samples into a batch, normalising their features.
    fn gather(&self, indices: impl ExactSizeIterator<Item = usize>, norm: &Normaliser) -> Batch {
        let mut inputs = Matrix::zeros(indices.len(), FEATURES);
        let mut labels = Vec::with_capacity(indices.len());
        for (i, row) in indices.zip(inputs.row_iter_mut()) {
            row.copy_from_slice(&self.features.data[i * FEATURES..(i + 1) * FEATURES]);
            norm.apply(row);
            labels.push(self.labels[i]);
        }
        Batch { inputs, labels }
    }
}

/// Per-feature standardisation, fitted on the training set.
struct Normaliser {
    mean: Vec<f32>,
    inv_std: Vec<f32>,
}

impl Normaliser {
    /// Fits mean and standard deviation per feature, ignoring non-finite readings.
    fn fit(data: &Matrix) -> Self {
        let mut sum = vec![0.0f64; data.cols];
        let mut sum_sq = vec![0.0f64; data.cols];
        let mut count = vec![0u32; data.cols];
        for row in data.row_iter() {
            for (j, &v) in row.iter().enumerate().filter(|(_, v)| v.is_finite()) {
                sum[j] += f64::from(v);
                sum_sq[j] += f64::from(v) * f64::from(v);
                count[j] += 1;
            }
        }
        let mut mean = Vec::with_capacity(data.cols);
        let mut inv_std = Vec::with_capacity(data.cols);
        for ((s, s2), n) in sum.iter().zip(&sum_sq).zip(&count) {
            let n = f64::from((*n).max(1));
            let m = s / n;
            let var = (s2 / n - m * m).max(1e-12);
            mean.push(m as f32);
            inv_std.push((1.0 / var.sqrt()) as f32);
        }
        Normaliser { mean, inv_std }
    }

    fn apply(&self, row: &mut [f32]) {
        for ((v, m), s) in row.iter_mut().zip(&self.mean).zip(&self.inv_std) {
            *v = (*v - m) * s;
        }
    }
}

/// The hidden process behind the synthetic data: class blobs in a latent
/// space, pushed through a fixed non-linear "sensor" map.
struct Generator {
    /// `CLASSES * BLOBS_PER_CLASS` blob centres in latent space.
    centres: Matrix,
    /// `LATENT × FEATURES` mixing matrix.
    mixing: Matrix,
    /// Per-feature units: readings are `offset + scale * signal`.
    offset: Vec<f32>,
    scale: Vec<f32>,
}

impl Generator {
    fn new(rng: &mut Rng) -> Self {
        let offset = (0..FEATURES).map(|_| 20.0 * rng.normal()).collect();
        let scale = (0..FEATURES).map(|_| 0.1 + 10.0 * rng.uniform()).collect();
        Generator {
            centres: Matrix::random_normal(CLASSES * BLOBS_PER_CLASS, LATENT, 1.0, rng),
            mixing: Matrix::random_normal(LATENT, FEATURES, 1.5 / (LATENT as f32).sqrt(), rng),
            offset,
            scale,
        }
    }

    fn sample(&self, len: usize, rng: &mut Rng) -> Dataset {
        const LATENT_NOISE: f32 = 0.8;
        const SENSOR_NOISE: f32 = 0.3;
        let mut latent = Matrix::zeros(len, LATENT);
        let mut labels = Vec::with_capacity(len);
        for row in latent.row_iter_mut() {
            let class = rng.below(CLASSES);
            let blob = class * BLOBS_PER_CLASS + rng.below(BLOBS_PER_CLASS);
            let centre = &self.centres.data[blob * LATENT..(blob + 1) * LATENT];
            for (z, &c) in row.iter_mut().zip(centre) {
                *z = c + LATENT_NOISE * rng.normal();
            }
            let label = if rng.uniform() < LABEL_NOISE {
                rng.below(CLASSES)
            } else {
                class
            };
            labels.push(label as u8);
        }
        let zero_bias = [0.0; FEATURES];
        let mut features = matmul_bias(&latent, &self.mixing, &zero_bias);
        for row in features.row_iter_mut() {
            for ((v, &offset), &scale) in row.iter_mut().zip(&self.offset).zip(&self.scale) {
                *v = offset + scale * (v.tanh() + SENSOR_NOISE * rng.normal());
            }
        }
        Dataset { features, labels }
    }
}

/// Builds the training and test sets; a few training rows get a NaN reading.
#[instrument(skip_all, fields(items = TRAIN_SAMPLES + TEST_SAMPLES))]
fn generate_dataset(rng: &mut Rng) -> (Dataset, Dataset) {
    let generator = Generator::new(rng);
    let mut train = generator.sample(TRAIN_SAMPLES, rng);
    let test = generator.sample(TEST_SAMPLES, rng);
    for _ in 0..CORRUPTED_SAMPLES {
        let (sample, feature) = (rng.below(TRAIN_SAMPLES), rng.below(FEATURES));
        train.features.data[sample * FEATURES + feature] = f32::NAN;
    }
    (train, test)
}

/// Busy-waits for `latency`, standing in for reading a shard from storage.
/// (A spin rather than `thread::sleep`, which is too coarse at this scale.)
fn simulate_io_wait(latency: Duration) {
    let start = Instant::now();
    while start.elapsed() < latency {
        std::hint::spin_loop();
    }
}

/// Fetches and normalises one mini-batch.
#[instrument(skip_all, fields(items = indices.len(), bytes = indices.len() * Dataset::BYTES_PER_SAMPLE))]
fn load_batch(data: &Dataset, indices: &[usize], norm: &Normaliser) -> Batch {
    simulate_io_wait(IO_LATENCY);
    data.gather(indices.iter().copied(), norm)
}

/// Why a batch was rejected.
#[derive(Debug)]
struct BatchError {
    sample: usize,
    feature: usize,
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sample {} has a non-finite reading in feature {}",
            self.sample, self.feature
        )
    }
}

impl Error for BatchError {}

/// Rejects batches with non-finite inputs, which would poison the weights.
#[instrument(skip_all, err, fields(items = indices.len()))]
fn validate_batch(batch: &Batch, indices: &[usize]) -> Result<(), BatchError> {
    for (row, &sample) in batch.inputs.row_iter().zip(indices) {
        if let Some(feature) = row.iter().position(|v| !v.is_finite()) {
            return Err(BatchError { sample, feature });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

/// A fully connected layer, `y = x · W + b`, with its own long-lived span.
struct Linear {
    /// `fan_in × fan_out`.
    weight: Matrix,
    bias: Vec<f32>,
    /// Created once, entered on every forward pass.
    span: Span,
}

impl Linear {
    /// He-initialised layer.
    fn new(layer: usize, fan_in: usize, fan_out: usize, rng: &mut Rng) -> Self {
        let std_dev = (2.0 / fan_in as f32).sqrt();
        Linear {
            weight: Matrix::random_normal(fan_in, fan_out, std_dev, rng),
            bias: vec![0.0; fan_out],
            span: tracing::debug_span!("linear", layer, fan_in, fan_out),
        }
    }

    fn forward(&self, x: &Matrix) -> Matrix {
        let _entered = self.span.enter();
        matmul_bias(x, &self.weight, &self.bias)
    }

    /// Multiply-adds of a forward pass over `rows` samples, counted as 2 FLOPs each.
    fn flops(&self, rows: usize) -> usize {
        2 * rows * self.weight.rows * self.weight.cols
    }
}

/// Gradients of one layer's parameters.
struct LayerGrad {
    weight: Matrix,
    bias: Vec<f32>,
}

/// What the forward pass keeps for the backward pass.
struct Activations {
    /// `inputs[i]` is the input of layer `i`.
    inputs: Vec<Matrix>,
    logits: Matrix,
}

/// A multi-layer perceptron with ReLU between layers.
struct Mlp {
    layers: Vec<Linear>,
    /// Extra busy time added to each forward pass, as a percentage of its own time
    /// (`--slowdown PCT`: a regression to detect with `spanprof compare`).
    slowdown_pct: f64,
}

impl Mlp {
    fn new(sizes: &[usize], slowdown_pct: f64, rng: &mut Rng) -> Self {
        let layers = sizes
            .windows(2)
            .enumerate()
            .map(|(i, w)| Linear::new(i, w[0], w[1], rng))
            .collect();
        Mlp {
            layers,
            slowdown_pct,
        }
    }

    fn num_params(&self) -> usize {
        self.layers
            .iter()
            .map(|l| l.weight.data.len() + l.bias.len())
            .sum()
    }

    fn forward_flops(&self, rows: usize) -> usize {
        self.layers.iter().map(|l| l.flops(rows)).sum()
    }

    /// Weight gradients for every layer, input gradients for all but the first.
    fn backward_flops(&self, rows: usize) -> usize {
        2 * self.forward_flops(rows) - self.layers[0].flops(rows)
    }

    #[instrument(skip_all, fields(flops = self.forward_flops(x.rows)))]
    fn forward(&self, x: Matrix) -> Activations {
        let start = Instant::now();
        let mut inputs = Vec::with_capacity(self.layers.len());
        let mut h = x;
        for (i, layer) in self.layers.iter().enumerate() {
            let mut out = layer.forward(&h);
            if i + 1 < self.layers.len() {
                relu_in_place(&mut out);
            }
            inputs.push(std::mem::replace(&mut h, out));
        }
        if self.slowdown_pct > 0.0 {
            // Busy-waits for the extra share of the pass's own time: PCT % slower.
            let until = start.elapsed().mul_f64(1.0 + self.slowdown_pct / 100.0);
            while start.elapsed() < until {
                std::hint::spin_loop();
            }
        }
        Activations { inputs, logits: h }
    }

    #[instrument(skip_all, fields(flops = self.backward_flops(acts.logits.rows)))]
    fn backward(&self, acts: &Activations, grad_logits: Matrix) -> Vec<LayerGrad> {
        let mut grads = Vec::with_capacity(self.layers.len());
        let mut grad_out = grad_logits;
        for (i, (layer, input)) in self.layers.iter().zip(&acts.inputs).enumerate().rev() {
            grads.push(LayerGrad {
                weight: matmul_tn(input, &grad_out),
                bias: column_sums(&grad_out),
            });
            if i > 0 {
                let mut grad_in = matmul_nt(&grad_out, &layer.weight);
                relu_backward(&mut grad_in, input);
                grad_out = grad_in;
            }
        }
        grads.reverse();
        grads
    }
}

/// Loss over a batch, with its gradient and the number of correct predictions.
struct LossOutput {
    loss: f32,
    correct: usize,
    /// Gradient of the mean loss with respect to the logits.
    grad: Matrix,
}

/// Mean softmax cross-entropy.
#[instrument(name = "loss", skip_all, fields(items = logits.rows))]
fn softmax_cross_entropy(logits: &Matrix, labels: &[u8]) -> LossOutput {
    let scale = 1.0 / logits.rows as f32;
    let mut grad = logits.clone();
    let mut total = 0.0f32;
    let mut correct = 0;
    for (row, &label) in grad.row_iter_mut().zip(labels) {
        let label = usize::from(label);
        let (argmax, max) =
            row.iter()
                .copied()
                .enumerate()
                .fold((0, f32::NEG_INFINITY), |best, (i, v)| {
                    if v > best.1 {
                        (i, v)
                    } else {
                        best
                    }
                });
        if argmax == label {
            correct += 1;
        }
        let target = row[label] - max;
        let mut sum = 0.0;
        for v in row.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        // -log softmax(row)[label], computed stably.
        total += sum.ln() - target;
        for v in row.iter_mut() {
            *v *= scale / sum;
        }
        row[label] -= scale;
    }
    LossOutput {
        loss: total * scale,
        correct,
        grad,
    }
}

/// First and second moment estimates for one parameter tensor.
struct Moments {
    m: Vec<f32>,
    v: Vec<f32>,
}

/// The Adam optimiser.
struct Adam {
    beta1: f32,
    beta2: f32,
    eps: f32,
    t: i32,
    /// Weight then bias moments, per layer.
    moments: Vec<Moments>,
}

impl Adam {
    fn new(model: &Mlp) -> Self {
        let moments = model
            .layers
            .iter()
            .flat_map(|l| [l.weight.data.len(), l.bias.len()])
            .map(|n| Moments {
                m: vec![0.0; n],
                v: vec![0.0; n],
            })
            .collect();
        Adam {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            t: 0,
            moments,
        }
    }

    #[instrument(name = "optimizer_step", skip_all, fields(params = model.num_params()))]
    fn step(&mut self, model: &mut Mlp, grads: &[LayerGrad], lr: f32) {
        self.t += 1;
        let (b1, b2, eps) = (self.beta1, self.beta2, self.eps);
        let correction1 = 1.0 - b1.powi(self.t);
        let correction2 = 1.0 - b2.powi(self.t);
        let params = model
            .layers
            .iter_mut()
            .flat_map(|l| [&mut l.weight.data[..], &mut l.bias[..]]);
        let grads = grads.iter().flat_map(|g| [&g.weight.data[..], &g.bias[..]]);
        for ((param, grad), moments) in params.zip(grads).zip(&mut self.moments) {
            let state = moments.m.iter_mut().zip(moments.v.iter_mut());
            for ((p, &g), (m, v)) in param.iter_mut().zip(grad).zip(state) {
                *m = b1 * *m + (1.0 - b1) * g;
                *v = b2 * *v + (1.0 - b2) * g * g;
                *p -= lr * (*m / correction1) / ((*v / correction2).sqrt() + eps);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------

/// Everything a training run needs.
pub struct Trainer {
    /// Number of epochs the learning-rate schedule spans.
    pub epochs: usize,
    model: Mlp,
    optimizer: Adam,
    train_set: Dataset,
    test_set: Dataset,
    normaliser: Normaliser,
    rng: Rng,
    /// Optimiser steps taken so far.
    step: usize,
}

/// Metrics of one epoch.
pub struct EpochStats {
    pub train_loss: f32,
    pub test_loss: f32,
    pub test_accuracy: f32,
    /// Batches rejected by `validate_batch`.
    pub skipped: usize,
}

impl Trainer {
    /// Generates the data sets (the `generate_dataset` span) and builds the model, creating
    /// its long-lived `linear` spans.
    /// `slowdown_pct` makes every forward pass that much slower (0: as fast as it is).
    pub fn new(epochs: usize, slowdown_pct: f64) -> Self {
        let mut rng = Rng::new(SEED);
        let (train_set, test_set) = generate_dataset(&mut rng);
        let model = Mlp::new(&LAYER_SIZES, slowdown_pct, &mut rng);
        Trainer {
            epochs,
            optimizer: Adam::new(&model),
            normaliser: Normaliser::fit(&train_set.features),
            model,
            train_set,
            test_set,
            rng,
            step: 0,
        }
    }

    /// Training samples seen per epoch.
    pub fn samples_per_epoch(&self) -> usize {
        self.train_set.len()
    }

    /// Cosine decay from `LEARNING_RATE` to zero over the whole run.
    pub fn learning_rate(&self) -> f32 {
        let total = self.epochs * (self.train_set.len() / BATCH_SIZE);
        let progress = self.step as f32 / total as f32;
        LEARNING_RATE * 0.5 * (1.0 + (PI * progress).cos())
    }

    /// One pass over the shuffled training set, then an evaluation on the test set.
    #[instrument(name = "epoch", skip(self))]
    pub fn train_epoch(&mut self, epoch: usize) -> EpochStats {
        let order = self.shuffled_indices();
        let (mut loss_sum, mut steps, mut skipped) = (0.0, 0, 0);
        for indices in order.chunks_exact(BATCH_SIZE) {
            match self.train_step(indices) {
                Ok(loss) => {
                    loss_sum += loss;
                    steps += 1;
                }
                Err(_) => skipped += 1,
            }
        }
        let (test_loss, test_accuracy) = self.evaluate(epoch);
        EpochStats {
            train_loss: loss_sum / steps.max(1) as f32,
            test_loss,
            test_accuracy,
            skipped,
        }
    }

    #[instrument(name = "shuffle", skip_all, fields(items = self.train_set.len()))]
    fn shuffled_indices(&mut self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.train_set.len()).collect();
        self.rng.shuffle(&mut order);
        order
    }

    #[instrument(skip_all, fields(step = self.step, items = indices.len()))]
    fn train_step(&mut self, indices: &[usize]) -> Result<f32, BatchError> {
        let lr = self.learning_rate();
        self.step += 1;
        let batch = load_batch(&self.train_set, indices, &self.normaliser);
        validate_batch(&batch, indices)?;
        let acts = self.model.forward(batch.inputs);
        let out = softmax_cross_entropy(&acts.logits, &batch.labels);
        let grads = self.model.backward(&acts, out.grad);
        self.optimizer.step(&mut self.model, &grads, lr);
        tracing::info!(
            histogram.loss = f64::from(out.loss),
            monotonic_counter.samples = indices.len() as u64,
            gauge.learning_rate = f64::from(lr),
        );
        Ok(out.loss)
    }

    /// Mean loss and accuracy on the test set.
    #[instrument(skip(self), fields(items = self.test_set.len()))]
    fn evaluate(&self, epoch: usize) -> (f32, f32) {
        let len = self.test_set.len();
        let (mut loss_sum, mut correct) = (0.0, 0);
        for start in (0..len).step_by(EVAL_BATCH_SIZE) {
            let end = (start + EVAL_BATCH_SIZE).min(len);
            let batch = self.test_set.gather(start..end, &self.normaliser);
            let acts = self.model.forward(batch.inputs);
            let out = softmax_cross_entropy(&acts.logits, &batch.labels);
            loss_sum += out.loss * (end - start) as f32;
            correct += out.correct;
        }
        let accuracy = correct as f32 / len as f32;
        tracing::info!(gauge.test_accuracy_ratio = f64::from(accuracy));
        (loss_sum / len as f32, accuracy)
    }
}
