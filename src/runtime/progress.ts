/**
 * Progress of tool calls, on its way to whoever waits for it: the MCP client that made the call
 * (its own `progressToken`) and the `/events` stream (the call's `trace_id`). An upstream decides
 * how many `notifications/progress` it sends, a hostile one a million: each way out keeps at most a
 * few progress notifications not yet sent (the latest always) and sends at most one per interval
 * (`LatestThrottle`), so memory stays bounded however many arrive and however slowly the other side
 * reads, while the few steps of an ordinary call all arrive.
 */
import type { CallProgress } from "../mcp/types.js"

/**
 * Delivers the values pushed, at most one per `intervalMs` and, when delivering returns a promise,
 * one at a time: up to `keep` values wait their turn in order, and past that a value pushed replaces
 * the last one waiting (the latest is always delivered). One timer at most (unref'd), cleared by
 * `close()`, after which nothing more is delivered.
 */
export class LatestThrottle<T> {
  private last = Number.NEGATIVE_INFINITY
  private readonly waiting: T[] = []
  private timer: NodeJS.Timeout | undefined
  private busy = false
  private closed = false

  constructor(
    private readonly intervalMs: number,
    private readonly deliver: (value: T) => void | Promise<unknown>,
    private readonly keep = 1
  ) {}

  push(value: T): void {
    if (this.closed) return
    if (this.waiting.length < this.keep) this.waiting.push(value)
    else this.waiting[this.waiting.length - 1] = value
    this.flush()
  }

  close(): void {
    this.closed = true
    this.waiting.length = 0
    clearTimeout(this.timer)
    this.timer = undefined
    // A drain under way ends with it.
    const drained = this.drained
    this.drained = undefined
    drained?.()
  }

  /**
   * Delivers what is waiting, then closes: resolves once the last delivery has settled, or after
   * `ms` (a reader that does not read), closing then with what is left.
   */
  drain(ms: number): Promise<void> {
    if (this.draining !== undefined) return this.draining
    if (this.closed || (!this.busy && this.waiting.length === 0)) {
      this.close()
      return Promise.resolve()
    }
    this.draining = new Promise<void>((resolve) => {
      const end = () => {
        clearTimeout(timer)
        this.drained = undefined
        this.close()
        resolve()
      }
      const timer = setTimeout(end, ms)
      this.drained = end
    })
    return this.draining
  }

  private drained: (() => void) | undefined
  private draining: Promise<void> | undefined

  private readonly flush = (): void => {
    this.timer = undefined
    if (!this.busy && this.waiting.length === 0) this.drained?.()
    if (this.closed || this.busy || this.waiting.length === 0) return
    const wait = this.last + this.intervalMs - performance.now()
    if (wait > 0) {
      this.timer ??= setTimeout(this.flush, Math.ceil(wait))
      this.timer.unref()
      return
    }
    const value = this.waiting.shift() as T
    this.last = performance.now()
    let sent: void | Promise<unknown>
    try {
      sent = this.deliver(value)
    } catch {
      return this.flush()
    }
    if (sent === undefined) return this.flush()
    this.busy = true
    sent.then(
      () => this.settled(),
      () => this.settled()
    )
  }

  private settled(): void {
    this.busy = false
    this.flush()
  }
}

/** A call's progress as `/events` carries it (event `progress`). */
export interface ProgressEvent extends CallProgress {
  readonly scope: string
  readonly agent_id: string | null
  readonly service_name: string
  readonly tool_name: string
  readonly trace_id: string
  readonly span_id: string
  /** The asynchronous call's id, when the call is one (`"async": true`). */
  readonly call_id?: string
}

/** At most this many progress events per call and second reach `/events`. */
export const EVENTS_PROGRESS_INTERVAL_MS = 100

/** The listeners of every call's progress (the `/events` streams). */
export class ProgressEvents {
  private readonly listeners = new Set<(e: ProgressEvent) => void>()

  on(listener: (e: ProgressEvent) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  get listening(): boolean {
    return this.listeners.size > 0
  }

  emit(e: ProgressEvent): void {
    for (const listener of this.listeners) listener(e)
  }

  /** Drops every listener (the store's release: no progress comes after it). */
  clear(): void {
    this.listeners.clear()
  }
}
