/**
 * An index of the XState scheduler's delayed events by the actor that scheduled them.
 *
 * When any actor stops (a finished connection attempt, a removed service), XState 5.33 cancels its
 * delayed events with `scheduler.cancelAll`, which walks every delayed event of the whole system
 * (`for...in` over an object whose keys come and go, so V8 keeps it as a dictionary and gathers and
 * sorts its keys on each walk). With a thousand services, each holding two or three `after` timers,
 * a thousand connection attempts finishing at start cost about half a second of CPU in that walk
 * alone. `indexDelayedEvents` keeps the ids each actor scheduled, so that stopping it cancels only
 * its own. Delays, clocks (SimulatedClock in tests) and the events delivered are XState's own.
 *
 * It wraps methods of XState's scheduler and reads its record of pending events, neither of which is
 * public API: package.json pins xstate to the exact version this was written against (5.33.3), and
 * test/runtime/timers.test.ts reads the same record to check what is cancelled. Recheck both before
 * bumping xstate.
 */
import type { ActorSystem, AnyActorRef, EventObject } from "xstate"

/** The scheduler of an XState 5 actor system (`system.scheduler`). */
interface Scheduler {
  schedule(source: AnyActorRef, target: AnyActorRef, event: EventObject, delay: number, id?: string): void
  cancel(source: AnyActorRef, id: string): void
  cancelAll(actorRef: AnyActorRef): void
}

/** Past this many ids for one actor, ids whose event was already delivered are dropped from the index. */
const PRUNE_AT = 32

/**
 * Makes `system.scheduler.cancelAll(actor)` cost the number of the actor's own delayed events
 * instead of the system's. Call it once, on the root actor's system, before the root starts.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const indexDelayedEvents = (system: ActorSystem<any>): void => {
  const scheduler = system.scheduler as unknown as Scheduler
  // XState's own record of pending delayed events, keyed `<sessionId>.<id>` (see createSystem).
  const pending = (system as unknown as { _snapshot?: { _scheduledEvents?: Record<string, unknown> } })._snapshot
  const { schedule, cancel } = scheduler
  const byActor = new Map<AnyActorRef, Set<string>>()

  scheduler.schedule = (source, target, event, delay, id = Math.random().toString(36).slice(2)) => {
    schedule(source, target, event, delay, id)
    let ids = byActor.get(source)
    if (ids === undefined) byActor.set(source, (ids = new Set()))
    ids.add(id)
    // `after` ids are fixed per state, so the set stays small; delivered events leave no other trace.
    if (ids.size > PRUNE_AT && pending?._scheduledEvents !== undefined) {
      for (const known of ids) if (!Object.hasOwn(pending._scheduledEvents, `${source.sessionId}.${known}`)) ids.delete(known)
    }
  }
  scheduler.cancel = (source, id) => {
    cancel(source, id)
    const ids = byActor.get(source)
    if (ids === undefined) return
    ids.delete(id)
    if (ids.size === 0) byActor.delete(source)
  }
  scheduler.cancelAll = (actorRef) => {
    const ids = byActor.get(actorRef)
    if (ids === undefined) return
    byActor.delete(actorRef)
    // Cancelling an id whose event was already delivered does nothing.
    for (const id of ids) cancel(actorRef, id)
  }
}
