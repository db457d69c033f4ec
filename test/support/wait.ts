/**
 * How tests wait: on a condition they can observe (`eventually`), on a promise with a bound
 * (`within`), for one turn of the event loop (`flush`), or for a period in which something must
 * NOT happen (`quietFor`, the only deliberate pause). `sampleEvery` runs a sampler (RSS, /health,
 * gauges) at a steady pace while a test does its work. `together` starts a file's set-up steps at
 * once (a browser's launch beside the stores' start). Nothing here sleeps to let something happen:
 * a test that needs a subscription, a stream or a process in place waits for a sign of it.
 */

/**
 * Waits for every step, started together (a browser's launch, stores, fixtures: each takes a
 * while, none needs another). Rejects with the first failure, but only once every step has
 * settled, so that none is still starting when the hooks that end them run; each step keeps what
 * it made where those hooks find it (`.then((b) => (browser = b))`).
 */
export const together = async (...steps: ReadonlyArray<Promise<unknown>>): Promise<void> => {
  const outcomes = await Promise.allSettled(steps)
  for (const outcome of outcomes) if (outcome.status === "rejected") throw outcome.reason
}

/**
 * Checks `check` at once, then every `every` ms, until it holds or `ms` have passed; resolves with
 * the last outcome (so `expect(await eventually(...)).toBe(true)` fails with a clear line).
 */
export const eventually = async (check: () => boolean | Promise<boolean>, ms: number, every = 25): Promise<boolean> => {
  const end = Date.now() + ms
  for (;;) {
    if (await check()) return true
    if (Date.now() > end) return false
    await pause(every)
  }
}

/** Rejects with `label` when `promise` has not settled within `ms`. */
export const within = <T>(promise: Promise<T>, ms: number, label: string): Promise<T> => {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${label}`)), ms)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

/**
 * Waits `ms` during which the test expects nothing to happen (no reconnection, no notification, no
 * second request); the assertions that follow check that nothing did. There is no event to wait
 * for when the point is that none comes: use this only for that, never to let something happen.
 */
export const quietFor = (ms: number): Promise<void> => pause(ms)

/** Lets pending callbacks run: one macrotask turn of the event loop (promise actors settling, appends interleaving). */
export const flush = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve))

/** A sampler started by `sampleEvery`. */
export interface Sampler {
  /** Stops it; resolves once the sample in progress (if any) has finished. */
  stop(): Promise<void>
}

/**
 * Runs `take` at once and then `every` ms after each run has finished, until `stop()`: a sampling
 * pace (RSS, /health latency, gauges) while the test does its work, not a wait.
 */
export const sampleEvery = (every: number, take: () => unknown): Sampler => {
  let running = true
  const loop = (async () => {
    while (running) {
      await take()
      if (running) await pause(every)
    }
  })()
  return {
    stop: async () => {
      running = false
      await loop
    }
  }
}

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
