/**
 * The one bridge from actors to Effect: wait until an actor's snapshot satisfies a predicate, the
 * time-out passes, or the actor stops. Event-driven (a subscription, no polling) and leak-free:
 * every path, interruption included, unsubscribes and clears its timer. wait_service, call_tool
 * (waiting for a service to connect) and every other wait use it, so every wait ends when its HTTP
 * client goes away (the handler's fiber is interrupted). Library users get a Promise form.
 */
import { Cause, Duration, Effect, Exit } from "effect"
import type { AnyActorRef, SnapshotFrom } from "xstate"
import { TooMany } from "../domain/errors.js"

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
 * Waits until `predicate(snapshot)` holds (checked at once, then on every change), `timeoutMs`
 * passes, or the actor stops (deleted): `Effect.async` over the actor's subscription, with
 * `Effect.timeoutTo`. However it ends, the subscription is dropped; interrupting the effect (the HTTP
 * client went away) ends the wait at once, and gives the gate's place back. With `gate`, a wait that has to
 * subscribe first enters the gate (failing with its `TooMany` when it is full).
 */
export const awaitSnapshot = <A extends AnyActorRef>(
  actor: A,
  predicate: (snapshot: SnapshotFrom<A>) => boolean,
  options: { readonly timeoutMs: number; readonly gate?: WaitGate | undefined }
): Effect.Effect<WaitResult<SnapshotFrom<A>>, TooMany> =>
  Effect.suspend(() => {
    const started = performance.now()
    const result = (end: WaitEnd, snapshot: SnapshotFrom<A>): WaitResult<SnapshotFrom<A>> => ({
      end,
      snapshot,
      elapsedMs: performance.now() - started
    })
    let last = actor.getSnapshot() as SnapshotFrom<A>
    if (predicate(last)) return Effect.succeed(result("reached", last))
    if (!isActive(last)) return Effect.succeed(result("stopped", last))
    const change = Effect.async<WaitEnd>((resume) => {
      let done = false
      let subscription: { unsubscribe(): void } | undefined
      // Every end drops the subscription: the canceler returned below runs only when the wait is interrupted.
      const end = (how: WaitEnd) => {
        if (done) return
        done = true
        subscription?.unsubscribe()
        resume(Effect.succeed(how))
      }
      const seen = (snapshot: SnapshotFrom<A>) => {
        last = snapshot
        if (predicate(snapshot)) end("reached")
        else if (!isActive(snapshot)) end("stopped")
      }
      subscription = actor.subscribe({ next: seen, complete: () => end("stopped"), error: () => end("stopped") })
      // A change between the first look and the subscription is not replayed by it (nor a stop: a stopped actor takes no observer).
      if (done) subscription.unsubscribe()
      else if (actor.getSnapshot() !== last) seen(actor.getSnapshot() as SnapshotFrom<A>)
      return Effect.sync(() => subscription.unsubscribe())
    })
    const wait = change.pipe(
      Effect.timeoutTo({ duration: Duration.millis(Math.max(0, options.timeoutMs)), onTimeout: (): WaitEnd => "timeout", onSuccess: (how) => how }),
      Effect.map((how) => result(how, last))
    )
    const gate = options.gate
    if (gate === undefined) return wait
    return Effect.acquireUseRelease(
      Effect.suspend(() => {
        try {
          gate.enter()
          return Effect.void
        } catch (e) {
          return Effect.fail(e as TooMany)
        }
      }),
      () => wait,
      () => Effect.sync(() => gate.leave())
    )
  })

const isActive = (snapshot: unknown): boolean => (snapshot as { status?: string }).status === "active"

/**
 * `awaitSnapshot` as a Promise, for library users: `signal` ends the wait with `end: "aborted"`;
 * a full gate rejects with its `TooMany`.
 */
export const awaitSnapshotPromise = <A extends AnyActorRef>(
  actor: A,
  predicate: (snapshot: SnapshotFrom<A>) => boolean,
  options: { readonly timeoutMs: number; readonly signal?: AbortSignal | undefined; readonly gate?: WaitGate | undefined }
): Promise<WaitResult<SnapshotFrom<A>>> =>
  Effect.runPromiseExit(awaitSnapshot(actor, predicate, options), options.signal === undefined ? undefined : { signal: options.signal }).then((exit) => {
    if (Exit.isSuccess(exit)) return exit.value
    if (Exit.isInterrupted(exit)) return { end: "aborted" as const, snapshot: actor.getSnapshot() as SnapshotFrom<A>, elapsedMs: 0 }
    throw Cause.squash(exit.cause)
  })
