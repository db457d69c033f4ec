/**
 * Bounded containers for monitoring: everything the store keeps about the past has a fixed
 * ceiling, however long it runs (a ring of the last N items, a per-second histogram window).
 */

/** The last `capacity` items, oldest first. */
export class Ring<T> {
  private readonly items: T[] = []
  private start = 0

  constructor(readonly capacity: number) {}

  push(item: T): void {
    if (this.items.length < this.capacity) this.items.push(item)
    else {
      this.items[this.start] = item
      this.start = (this.start + 1) % this.capacity
    }
  }

  get size(): number {
    return this.items.length
  }

  /** Oldest first. */
  toArray(): T[] {
    return [...this.items.slice(this.start), ...this.items.slice(0, this.start)]
  }

  /** Whether an item meets `test` (in no order), without copying the items. */
  some(test: (item: T) => boolean): boolean {
    return this.items.some(test)
  }

  /** The newest item. */
  last(): T | undefined {
    if (this.items.length === 0) return undefined
    return this.items[(this.start + this.items.length - 1) % this.items.length]
  }
}

/**
 * The last `capacity` numeric samples (a time and a value each), oldest first, in typed arrays that
 * grow by doubling up to the capacity. A service keeps a thousand of them and adds one per health
 * check and per tool call: as objects in a `Ring`, each would live until a thousand newer ones
 * replace it, long enough to be promoted and then collected by a major collection; here a sample
 * costs no object at all.
 */
export class SampleRing {
  private at: Float64Array
  private value: Float64Array
  private start = 0
  private count = 0

  constructor(readonly capacity: number, initial = 8) {
    const n = Math.max(1, Math.min(capacity, initial))
    this.at = new Float64Array(n)
    this.value = new Float64Array(n)
  }

  /** Adds a sample; returns the slot it went to (for columns kept beside these two). */
  push(at: number, value: number): number {
    if (this.count === this.at.length && this.count < this.capacity) this.grow()
    let slot: number
    if (this.count < this.at.length) slot = (this.start + this.count++) % this.at.length
    else {
      slot = this.start
      this.start = (this.start + 1) % this.at.length
    }
    this.at[slot] = at
    this.value[slot] = value
    return slot
  }

  private grow(): void {
    const n = Math.min(this.capacity, this.at.length * 2)
    const at = new Float64Array(n)
    const value = new Float64Array(n)
    for (let i = 0; i < this.count; i++) {
      const from = (this.start + i) % this.at.length
      at[i] = this.at[from]!
      value[i] = this.value[from]!
    }
    this.at = at
    this.value = value
    this.start = 0
  }

  get size(): number {
    return this.count
  }

  /** The slot of the i-th sample, oldest first (0 <= i < size). */
  slot(i: number): number {
    return (this.start + i) % this.at.length
  }

  /** The time of the sample in a slot. */
  atOf(slot: number): number {
    return this.at[slot]!
  }

  /** The value of the sample in a slot. */
  valueOf(slot: number): number {
    return this.value[slot]!
  }

  /** Every value, oldest first. */
  values(): number[] {
    const out = new Array<number>(this.count)
    for (let i = 0; i < this.count; i++) out[i] = this.value[this.slot(i)]!
    return out
  }

  /** The newest value. */
  lastValue(): number | undefined {
    return this.count === 0 ? undefined : this.value[this.slot(this.count - 1)]
  }
}

/**
 * A map that forgets its least recently used keys beyond `capacity` entries: a key read or written
 * moves to the end of the map's order (many short-lived keys do not push out a long-lived one in use).
 */
export class BoundedMap<K, V> extends Map<K, V> {
  constructor(readonly capacity: number) {
    super()
  }

  override get(key: K): V | undefined {
    if (!super.has(key)) return undefined
    const value = super.get(key) as V
    super.delete(key)
    super.set(key, value)
    return value
  }

  override set(key: K, value: V): this {
    if (super.has(key)) super.delete(key)
    else if (this.size >= this.capacity) {
      const oldest = this.keys().next()
      if (!oldest.done) this.delete(oldest.value)
    }
    return super.set(key, value)
  }
}

/** Histogram bins: 0.05 ms to about 100 s on a log scale (about 12 % wide each). */
const BINS = 128
const MIN_MS = 0.05
const GROWTH = 1.12
const binOf = (ms: number) => Math.max(0, Math.min(BINS - 1, Math.floor(Math.log(Math.max(ms, MIN_MS) / MIN_MS) / Math.log(GROWTH))))
const valueOf = (bin: number) => MIN_MS * GROWTH ** (bin + 0.5)

/**
 * Latencies of the last `seconds` seconds in per-second log histograms: fixed memory (seconds x
 * 128 counters) whatever the request rate; percentiles within about 6 %.
 */
export class LatencyWindow {
  private readonly buckets: Array<{ second: number; count: number; bins: Uint32Array }>

  constructor(readonly seconds = 60) {
    this.buckets = Array.from({ length: seconds }, () => ({ second: -1, count: 0, bins: new Uint32Array(BINS) }))
  }

  record(ms: number, now = Date.now()): void {
    const second = Math.floor(now / 1000)
    const bucket = this.buckets[second % this.seconds]!
    if (bucket.second !== second) {
      bucket.second = second
      bucket.count = 0
      bucket.bins.fill(0)
    }
    bucket.count += 1
    bucket.bins[binOf(ms)]! += 1
  }

  /** Count and percentiles over the window. */
  summary(now = Date.now()): { count: number; p50: number; p95: number; p99: number } {
    const current = Math.floor(now / 1000)
    const merged = new Uint32Array(BINS)
    let count = 0
    for (const b of this.buckets) {
      if (b.second < 0 || current - b.second >= this.seconds) continue
      count += b.count
      for (let i = 0; i < BINS; i++) merged[i]! += b.bins[i]!
    }
    const at = (q: number) => {
      if (count === 0) return 0
      const rank = Math.ceil(q * count)
      let seen = 0
      for (let i = 0; i < BINS; i++) {
        seen += merged[i]!
        if (seen >= rank) return Math.round(valueOf(i) * 100) / 100
      }
      return Math.round(valueOf(BINS - 1) * 100) / 100
    }
    return { count, p50: at(0.5), p95: at(0.95), p99: at(0.99) }
  }
}

/** The `q` quantile (0..1) of numbers; 0 for none. */
export const quantile = (values: ReadonlyArray<number>, q: number): number => {
  if (values.length === 0) return 0
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!
}
