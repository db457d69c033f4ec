/**
 * Cancelling and waiting, for the store's own requests and calls: what a call needs of its caller's
 * signal, the light cancellation of the hot path, and the two ways of waiting on a promise that a
 * cancel or a time-out ends (each releasing its listener and timer).
 */
/** What a tool call needs of its caller's signal: an AbortSignal has it, and so has the lighter `Cancel`. */
export interface CancelSignal {
  readonly aborted: boolean
  readonly reason: unknown
  addEventListener(type: "abort", listener: () => void, options?: { readonly once?: boolean }): void
  removeEventListener(type: "abort", listener: () => void): void
}

/** Settles as `promise` does, or as `cancelled()` does once `signal` aborts, whichever comes first (the listener removed either way). */
export const unlessCancelled = <A, B>(promise: Promise<A>, signal: CancelSignal, cancelled: () => Promise<B>): Promise<A | B> => {
  if (signal.aborted) return cancelled()
  let onAbort = () => undefined as void
  const aborted = new Promise<B>((resolve, reject) => signal.addEventListener("abort", (onAbort = () => void cancelled().then(resolve, reject)), { once: true }))
  return Promise.race([promise, aborted]).finally(() => signal.removeEventListener("abort", onAbort))
}

/** Resolves once `promise` settles, `ms` have passed or `signal` aborts, whichever comes first (its timer released then). */
export const settledWithin = (promise: Promise<unknown>, ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal?.aborted === true) return resolve()
    const end = () => {
      clearTimeout(timer)
      signal?.removeEventListener("abort", end)
      resolve()
    }
    const timer = setTimeout(end, ms)
    signal?.addEventListener("abort", end, { once: true })
    promise.then(end, end)
  })

/**
 * A caller's cancellation of one tool call, for the hot path: an AbortController and its signal
 * (an EventTarget) cost microseconds to make, for a call that is almost never cancelled.
 */
export class Cancel implements CancelSignal {
  aborted = false
  reason: unknown = undefined
  private listeners: Array<() => void> | undefined

  addEventListener(_type: "abort", listener: () => void): void {
    ;(this.listeners ??= []).push(listener)
  }

  removeEventListener(_type: "abort", listener: () => void): void {
    const i = this.listeners?.indexOf(listener) ?? -1
    if (i >= 0) this.listeners?.splice(i, 1)
  }

  /** Cancels once; the reason is an AbortError, as an AbortController's. */
  abort(reason: unknown = new DOMException("This operation was aborted", "AbortError")): void {
    if (this.aborted) return
    this.aborted = true
    this.reason = reason
    const listeners = this.listeners ?? []
    this.listeners = undefined
    for (const listener of listeners) listener()
  }
}
