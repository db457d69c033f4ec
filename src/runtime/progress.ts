/**
 * Progress of tool calls, on its way to whoever waits for it: the MCP client that made the call
 * (its own `progressToken`) and the `/events` stream (the call's `trace_id`). An upstream decides
 * how many `notifications/progress` it sends, a hostile one a million: each way out keeps at most
 * the latest progress not yet sent and sends at most one per interval (`LatestThrottle`), so memory
 * stays bounded however many arrive and however slowly the other side reads.
 */
import type { CallProgress } from "../mcp/types.js"

/**
 * Delivers the latest of the values pushed, at most one per `intervalMs` and, when delivering
 * returns a promise, one at a time: a value pushed meanwhile replaces the one waiting. One timer at
 * most (unref'd), cleared by `close()`, after which nothing more is delivered.
 */
export class LatestThrottle<T> {
  private last = Number.NEGATIVE_INFINITY
  private waiting: { readonly value: T } | undefined
  private timer: NodeJS.Timeout | undefined
  private busy = false
  private closed = false

  constructor(
    private readonly intervalMs: number,
    private readonly deliver: (value: T) => void | Promise<unknown>
  ) {}

  push(value: T): void {
    if (this.closed) return
    this.waiting = { value }
    this.flush()
  }

  close(): void {
    this.closed = true
    this.waiting = undefined
    clearTimeout(this.timer)
    this.timer = undefined
  }

  private readonly flush = (): void => {
    this.timer = undefined
    if (this.closed || this.busy || this.waiting === undefined) return
    const wait = this.last + this.intervalMs - performance.now()
    if (wait > 0) {
      this.timer ??= setTimeout(this.flush, Math.ceil(wait))
      this.timer.unref()
      return
    }
    const { value } = this.waiting
    this.waiting = undefined
    this.last = performance.now()
    let sent: void | Promise<unknown>
    try {
      sent = this.deliver(value)
    } catch {
      return
    }
    if (sent === undefined) return
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
