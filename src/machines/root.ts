/**
 * The store machine: the root of the actor system. It supervises the store scope's service actors
 * itself (same rules as an agent, src/machines/supervisor.ts) and owns one agent actor per agent,
 * spawning it with the agent's first service and routing that agent's events to it.
 */
import { assign, enqueueActions, setup, stopChild, type ActorRefFrom, type AnyEventObject } from "xstate"
import { dict, dictWith, dictWithout } from "../domain/dict.js"
import { STORE_SCOPE, type Scope, type ServiceDefinition } from "../domain/service-definition.js"
import type { MonitoringSettings } from "../domain/settings.js"
import { agentMachine, type AgentActorRef } from "./agent.js"
import { serviceMachine } from "./service.js"
import {
  agentSystemId,
  ownEntry,
  crashReport,
  releaseCrashed,
  restartCrashed,
  withSpawnedService,
  withoutService,
  type CrashReport,
  type SupervisorContext
} from "./supervisor.js"

export interface StoreInput {
  readonly settings: MonitoringSettings
}

export interface StoreContext extends SupervisorContext {
  /** By agent id; a null-prototype record ("__proto__" is a valid agent id). */
  readonly agents: Readonly<Record<string, AgentActorRef>>
}

/** Events of the store actor; `scope` routes a service event to the store itself or to an agent. */
export type StoreEvent =
  | { readonly type: "ADD_SERVICE"; readonly scope: Scope; readonly name: string; readonly definition: ServiceDefinition }
  | { readonly type: "REMOVE_SERVICE"; readonly scope: Scope; readonly name: string }
  | { readonly type: "REMOVE_AGENT"; readonly agentId: string }

export const storeMachine = setup({
  types: {
    context: {} as StoreContext,
    events: {} as StoreEvent,
    input: {} as StoreInput
  },
  actors: { service: serviceMachine, agent: agentMachine },
  actions: {
    releaseCrashed: ({ context, event }) => releaseCrashed(context, event),
    /** Tells the operator of a service actor's crash (supplied by the runtime; nothing by default). */
    reportCrash: (_, _report: CrashReport | undefined) => undefined
  }
}).createMachine({
  id: "store",
  context: ({ input }) => ({
    scope: STORE_SCOPE,
    settings: input.settings,
    services: dict(),
    crashes: dict(),
    agents: dict()
  }),
  initial: "running",
  states: {
    running: {
      on: {
        ADD_SERVICE: [
          {
            guard: ({ event }) => event.scope.kind === "agent",
            actions: enqueueActions(({ context, event, enqueue }) => {
              if (event.scope.kind !== "agent") return
              const agentId = event.scope.agentId
              if (ownEntry(context.agents, agentId) === undefined) {
                enqueue.assign({
                  agents: ({ context, spawn }) =>
                    dictWith(
                      context.agents,
                      agentId,
                      spawn("agent", {
                        id: agentSystemId(agentId),
                        systemId: agentSystemId(agentId),
                        input: { agentId, settings: context.settings }
                      })
                    )
                })
              }
              enqueue.sendTo(({ context }) => ownEntry(context.agents, agentId)!, {
                type: "ADD_SERVICE",
                name: event.name,
                definition: event.definition
              })
            })
          },
          {
            guard: ({ context, event }) => ownEntry(context.services, event.name) === undefined,
            actions: assign({
              services: ({ context, event, spawn }) => withSpawnedService(context, spawn, event.name, event.definition)
            })
          }
        ],
        REMOVE_SERVICE: [
          {
            guard: ({ event }) => event.scope.kind === "agent",
            actions: enqueueActions(({ context, event, enqueue }) => {
              if (event.scope.kind !== "agent") return
              const agent = ownEntry(context.agents, event.scope.agentId)
              if (agent) enqueue.sendTo(agent, { type: "REMOVE_SERVICE", name: event.name })
            })
          },
          {
            guard: ({ context, event }) => ownEntry(context.services, event.name) !== undefined,
            actions: [
              stopChild(({ context, event }) => ownEntry(context.services, event.name)!),
              assign({ services: ({ context, event }) => withoutService(context.services, event.name) })
            ]
          }
        ],
        REMOVE_AGENT: {
          guard: ({ context, event }) => ownEntry(context.agents, event.agentId) !== undefined,
          actions: [
            stopChild(({ context, event }) => ownEntry(context.agents, event.agentId)!),
            assign({ agents: ({ context, event }) => dictWithout(context.agents, event.agentId) })
          ]
        },
        "xstate.error.actor.*": {
          actions: [
            "releaseCrashed",
            { type: "reportCrash", params: ({ context, event }: { context: SupervisorContext; event: AnyEventObject }) => crashReport(context, event) },
            assign(({ context, event, spawn }) => restartCrashed(context as StoreContext, spawn, event))
          ]
        }
      }
    }
  }
})

export type StoreActorRef = ActorRefFrom<typeof storeMachine>
