/**
 * The one bridge from actors to awaiting code: wait until an actor's snapshot satisfies a
 * predicate, the time-out passes, the actor stops, or the caller aborts. Event-driven (a
 * subscription, no polling) and leak-free: every path unsubscribes and clears its timer.
 * wait_service, call_tool (waiting for a service to connect) and every other wait use it; the HTTP
 * layer passes the AbortSignal Effect gives an interrupted handler.
 */
import type { AnyActorRef, SnapshotFrom } from "xstate"
import { TooMany } from "./errors.js"

/** How a wait ended. */
export type WaitEnd = "reached" | "timeout" | "stopped" | "aborted"

export interface WaitResult<S> {
  readonly end: WaitEnd
  /** The last snapshot seen. */
  readonly snapshot: S
  readonly elapsedMs: number
}

/** Admission of waits: `enter` takes a place (or throws `TooMany`), `leave` gives it back. */
export interface WaitGate {
  enter(): void
  leave(): void
}

/**
 * The count of waits in progress and its cap (`max_waiters`): each wait that has to subscribe
 * (its status does not hold yet) takes a place for as long as it lasts, whatever ends it.
 */
export class Waiters implements WaitGate {
  #active = 0

  constructor(
    /** The cap. */
    readonly max: number
  ) {}

  /** Waits in progress (and places reserved for them). */
  get active(): number {
    return this.#active
  }

  enter(): void {
    if (this.#active >= this.max) throw this.#refusal()
    this.#active += 1
  }

  leave(): void {
    this.#active -= 1
  }

  /**
   * Takes `count` places at once, all or none (throws `TooMany`), for waits that must not be
   * refused once the request has changed something (add_service `?wait`). Its `gate` admits those
   * waits without counting them again; `release` gives every place back (idempotent).
   */
  reserve(count: number): { readonly gate: WaitGate; release(): void } {
    if (this.#active + count > this.max) throw this.#refusal()
    this.#active += count
    let held = true
    return {
      gate: { enter: () => undefined, leave: () => undefined },
      release: () => {
        if (held) this.#active -= count
        held = false
      }
    }
  }

  #refusal(): TooMany {
    return new TooMany({
      message: `Too many waits in progress (max_waiters is ${this.max}); try again later`,
      limit: "max_waiters",
      max: this.max,
      retryAfterSeconds: 1
    })
  }
}

/**
 * Resolves when `predicate(snapshot)` holds (checked at once, then on every change), after
 * `timeoutMs`, when the actor stops (deleted), or when `signal` aborts. Never rejects, except with
 * `gate`: a wait that has to subscribe first enters the gate (rejecting with its `TooMany` when it
 * is full) and leaves it however the wait ends.
 */
export const awaitSnapshot = <A extends AnyActorRef>(
  actor: A,
  predicate: (snapshot: SnapshotFrom<A>) => boolean,
  options: { readonly timeoutMs: number; readonly signal?: AbortSignal | undefined; readonly gate?: WaitGate | undefined }
): Promise<WaitResult<SnapshotFrom<A>>> => {
  const started = performance.now()
  const result = (end: WaitEnd, snapshot: SnapshotFrom<A>): WaitResult<SnapshotFrom<A>> => ({
    end,
    snapshot,
    elapsedMs: performance.now() - started
  })
  const current = actor.getSnapshot() as SnapshotFrom<A>
  if (predicate(current)) return Promise.resolve(result("reached", current))
  if ((current as { status?: string }).status !== "active") return Promise.resolve(result("stopped", current))
  if (options.signal?.aborted) return Promise.resolve(result("aborted", current))
  try {
    options.gate?.enter()
  } catch (e) {
    return Promise.reject(e)
  }
  return new Promise((resolve) => {
    let last = current
    let done = false
    const finish = (end: WaitEnd) => {
      if (done) return
      done = true
      clearTimeout(timer)
      subscription.unsubscribe()
      options.signal?.removeEventListener("abort", onAbort)
      options.gate?.leave()
      resolve(result(end, last))
    }
    const onAbort = () => finish("aborted")
    const timer = setTimeout(() => finish("timeout"), Math.max(0, options.timeoutMs))
    const subscription = actor.subscribe({
      next: (snapshot: SnapshotFrom<A>) => {
        last = snapshot
        if (predicate(snapshot)) finish("reached")
        else if ((snapshot as { status?: string }).status !== "active") finish("stopped")
      },
      complete: () => finish("stopped"),
      error: () => finish("stopped")
    })
    options.signal?.addEventListener("abort", onAbort, { once: true })
  })
}
