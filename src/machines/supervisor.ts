/**
 * What the store and agent machines share as supervisors of service actors: the system ids, the
 * spawn options of a service child, and what to do when a child crashes (docs/lifecycle.md,
 * Actors). Plain functions, so both machines stay readable and their rules cannot drift apart.
 */
import type { AnyActorRef, AnyEventObject } from "xstate"
import { dictWith, dictWithout } from "../domain/dict.js"
import type { Scope, ServiceDefinition } from "../domain/service-definition.js"
import type { MonitoringSettings } from "../domain/settings.js"
import type { ServiceActorRef, ServiceInput } from "./service.js"

/** System id of the store actor. */
export const STORE_SYSTEM_ID = "store"
/** System id of an agent actor. */
export const agentSystemId = (agentId: string): string => `agent:${agentId}`
/** System id of a service actor: `service:store:<name>` or `service:agent:<id>:<name>`. */
export const serviceSystemId = (scope: Scope, name: string): string =>
  scope.kind === "store" ? `service:store:${name}` : `service:agent:${scope.agentId}:${name}`

/**
 * The entry of `key` in a record keyed by service name or agent id. Plain indexing would also find
 * Object.prototype members for valid names such as "constructor", "toString" or "__proto__".
 */
export const ownEntry = <T>(record: Readonly<Record<string, T>>, key: string): T | undefined =>
  Object.hasOwn(record, key) ? record[key] : undefined

/**
 * Supervision state common to the store and agent machines. The records keyed by service name are
 * null-prototype objects (src/domain/dict.ts): names such as "constructor" are keys like any other.
 */
export interface SupervisorContext {
  readonly scope: Scope
  readonly settings: MonitoringSettings
  readonly services: Readonly<Record<string, ServiceActorRef>>
  /** How many times each service's actor has crashed (drives the restart backoff). */
  readonly crashes: Readonly<Record<string, number>>
}

/** Events a supervisor takes for its own scope. */
export type SupervisorEvent =
  | { readonly type: "ADD_SERVICE"; readonly name: string; readonly definition: ServiceDefinition }
  | { readonly type: "REMOVE_SERVICE"; readonly name: string }

/** The `spawn` that XState hands to `assign`; typed loosely because each machine's is generic. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Spawn = (src: "service", options: { id: string; systemId: string; input: ServiceInput }) => any

/** Spawns a service child and returns the services map with it (a new null-prototype record). */
export const withSpawnedService = (
  context: SupervisorContext,
  spawn: Spawn,
  name: string,
  definition: ServiceDefinition,
  crash?: ServiceInput["crash"]
): Record<string, ServiceActorRef> => {
  const id = serviceSystemId(context.scope, name)
  const input: ServiceInput = { scope: context.scope, name, definition, settings: context.settings, crash }
  return dictWith(context.services, name, spawn("service", { id, systemId: id, input }) as ServiceActorRef)
}

/** The services map without one name (a new null-prototype record). */
export const withoutService = (
  services: Readonly<Record<string, ServiceActorRef>>,
  name: string
): Record<string, ServiceActorRef> => dictWithout(services, name)

/** The name of the service whose child actor sent this `xstate.error.actor.<id>` event, if it is ours. */
export const crashedServiceName = (context: SupervisorContext, event: AnyEventObject): string | undefined => {
  const prefix = `xstate.error.actor.${serviceSystemId(context.scope, "")}`
  if (!event.type.startsWith(prefix)) return undefined
  const name = event.type.slice(prefix.length)
  return ownEntry(context.services, name) !== undefined ? name : undefined
}

/** A service actor's crash, as the `reportCrash` action receives it. */
export interface CrashReport {
  /** The crashed actor's system id (`serviceSystemId`). */
  readonly actorId: string
  /** How many times this service's actor has crashed, this one included. */
  readonly attempt: number
  readonly message: string
  readonly error: unknown
}

/** The message of a crash error. */
export const crashMessage = (error: unknown): string => (error instanceof Error ? error.message : String(error))

/**
 * The crash a supervisor's `xstate.error.actor.*` event reports, if it is one of its services'
 * (the `reportCrash` action's params, computed before `restartCrashed` counts it).
 */
export const crashReport = (context: SupervisorContext, event: AnyEventObject): CrashReport | undefined => {
  const name = crashedServiceName(context, event)
  if (name === undefined) return undefined
  const error = (event as { error?: unknown }).error
  return { actorId: serviceSystemId(context.scope, name), attempt: (ownEntry(context.crashes, name) ?? 0) + 1, message: crashMessage(error), error }
}

/**
 * Replaces a crashed child with a new actor that starts `unreachable` with the error and retries
 * after a backoff that grows with the number of crashes. The crash itself is reported by the
 * machine's `reportCrash` action (supplied by the runtime).
 */
export const restartCrashed = (
  context: SupervisorContext,
  spawn: Spawn,
  event: AnyEventObject
): Pick<SupervisorContext, "services" | "crashes"> => {
  const name = crashedServiceName(context, event)
  if (name === undefined) return { services: context.services, crashes: context.crashes }
  const crashed = ownEntry(context.services, name) as ServiceActorRef
  const message = crashMessage((event as { error?: unknown }).error)
  const attempt = (ownEntry(context.crashes, name) ?? 0) + 1
  const definition = crashed.getSnapshot().context.definition
  return {
    services: withSpawnedService({ ...context, services: withoutService(context.services, name) }, spawn, name, definition, {
      error: message,
      attempt
    }),
    crashes: dictWith(context.crashes, name, attempt)
  }
}

/**
 * Stops what a crashed service actor still runs. XState stops the children of an actor whose
 * transition threw (an action or guard error) only when the actor itself is stopped, which a crashed
 * actor never is: its invoked `holdConnection` would keep the connection open for ever.
 */
export const releaseCrashed = (context: SupervisorContext, event: AnyEventObject): void => {
  const name = crashedServiceName(context, event)
  if (name !== undefined) stopOrphans(ownEntry(context.services, name) as AnyActorRef)
}

/** Stops every descendant of an actor (the children a crashed actor still runs). */
export const stopOrphans = (actor: AnyActorRef): void => {
  const children = (actor.getSnapshot() as { children?: Record<string, AnyActorRef> }).children ?? {}
  for (const child of Object.values(children)) {
    stopOrphans(child)
    // `stop()` refuses non-root actors; `_stop()` is what a parent's stopChild calls.
    ;(child as unknown as { _stop(): void })._stop()
  }
}
