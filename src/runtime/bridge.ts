/**
 * The one bridge from actors to awaiting code: wait until an actor's snapshot satisfies a
 * predicate, the time-out passes, the actor stops, or the caller aborts. Event-driven (a
 * subscription, no polling) and leak-free: every path unsubscribes and clears its timer.
 * wait_service, call_tool (waiting for a service to connect) and every other wait use it; the HTTP
 * layer passes the AbortSignal Effect gives an interrupted handler.
 */
import type { AnyActorRef, SnapshotFrom } from "xstate"

/** How a wait ended. */
export type WaitEnd = "reached" | "timeout" | "stopped" | "aborted"

export interface WaitResult<S> {
  readonly end: WaitEnd
  /** The last snapshot seen. */
  readonly snapshot: S
  readonly elapsedMs: number
}

/**
 * Resolves when `predicate(snapshot)` holds (checked at once, then on every change), after
 * `timeoutMs`, when the actor stops (deleted), or when `signal` aborts. Never rejects.
 */
export const awaitSnapshot = <A extends AnyActorRef>(
  actor: A,
  predicate: (snapshot: SnapshotFrom<A>) => boolean,
  options: { readonly timeoutMs: number; readonly signal?: AbortSignal | undefined }
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
  return new Promise((resolve) => {
    let last = current
    let done = false
    const finish = (end: WaitEnd) => {
      if (done) return
      done = true
      clearTimeout(timer)
      subscription.unsubscribe()
      options.signal?.removeEventListener("abort", onAbort)
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
