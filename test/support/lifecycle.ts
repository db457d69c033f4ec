/**
 * The service lifecycle as tests check it: the status changes docs/lifecycle.md allows, as
 * (from, to) pairs, and a recorder of every status change of a service actor (an actor
 * subscription: nothing is missed, and a wait for a status is woken by the change itself).
 */
import type { ServiceActorRef, Transition } from "../../src/machines/service.js"

const ALL = ["initializing", "healthy", "warning", "reconnecting", "unreachable", "disconnecting", "disconnected"] as const

/** Every status change docs/lifecycle.md allows with reconnection on (its table, row by row). */
export const ALLOWED_TRANSITIONS: ReadonlySet<string> = new Set([
  "null>initializing",
  "initializing>healthy",
  "initializing>reconnecting",
  "healthy>warning",
  "healthy>reconnecting",
  "warning>healthy",
  "warning>reconnecting",
  "reconnecting>healthy",
  "reconnecting>unreachable",
  "unreachable>healthy",
  // any but disconnecting/disconnected -> disconnecting; then disconnected
  ...ALL.filter((s) => s !== "disconnecting" && s !== "disconnected").map((s) => `${s}>disconnecting`),
  "disconnecting>disconnected",
  // restart or a changed definition: from any status to initializing
  ...ALL.filter((s) => s !== "initializing").map((s) => `${s}>initializing`)
])

/** The recorded changes that the lifecycle table does not allow, as "from>to" strings. */
export const illegalTransitions = (transitions: ReadonlyArray<Pick<Transition, "from" | "to">>): string[] =>
  transitions.map((t) => `${t.from}>${t.to}`).filter((pair) => !ALLOWED_TRANSITIONS.has(pair))

/** Every status change of a service actor from now on (an actor subscription: nothing is missed). */
export interface StatusLog {
  /** Recorded transitions (from the actor's context, each seen once), oldest first. */
  readonly transitions: Transition[]
  /** The statuses entered, in order. */
  statuses(): string[]
  /** Resolves when `status` is entered after the transition index `from` (default: any recorded), or false after `ms`. */
  waitFor(status: string, ms: number, from?: number): Promise<boolean>
  stop(): void
}

/** Records from now on; with `fromStart`, the transitions the actor already has (its last 20) come first. */
export const recordStatuses = (actor: ServiceActorRef, options: { readonly fromStart?: boolean } = {}): StatusLog => {
  const existing = actor.getSnapshot().context.transitions
  const transitions: Transition[] = options.fromStart === true ? [...existing] : []
  const seen = new Set<Transition>(existing)
  const waiters = new Set<() => void>()
  const sub = actor.subscribe((snapshot) => {
    for (const t of snapshot.context.transitions) {
      if (seen.has(t)) continue
      seen.add(t)
      transitions.push(t)
    }
    for (const wake of [...waiters]) wake()
  })
  return {
    transitions,
    statuses: () => transitions.map((t) => t.to),
    waitFor: (status, ms, from = 0) =>
      new Promise<boolean>((resolve) => {
        const check = () => transitions.slice(from).some((t) => t.to === status)
        if (check()) return resolve(true)
        const wake = () => {
          if (!check()) return
          clearTimeout(timer)
          waiters.delete(wake)
          resolve(true)
        }
        const timer = setTimeout(() => {
          waiters.delete(wake)
          resolve(false)
        }, ms)
        waiters.add(wake)
      }),
    stop: () => {
      sub.unsubscribe()
      waiters.clear()
    }
  }
}
