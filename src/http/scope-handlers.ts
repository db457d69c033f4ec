/**
 * The handlers the store and agent groups share: decoding is done by the contract, so each one runs
 * a store operation (of the four operation services, src/runtime/operations.ts) on its scope, maps
 * its failures with `contract` (the one mapping to HTTP), and shapes the answer. The operations are
 * given once, when a group is built (`scopeHandlers`, `callAnswers`): nothing is looked up per
 * request. A scope is an Effect too: an agent's id is checked first (400 when malformed). An
 * interrupted handler (the client went away) interrupts the operation: a wait ends, a call is
 * cancelled upstream.
 */
import type * as Headers from "@effect/platform/Headers"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Cause, Effect, Exit, FiberRef, Option, type Schema } from "effect"
import type { ServerOptions } from "../config/options.js"
import { dict } from "../domain/dict.js"
import { readTraceContext, type TraceContext } from "../domain/trace-context.js"
import { requestSpan } from "./request-span.js"
import type { CallerOf, CallExit, CallToolError, CallToolInput, CallToolOutput } from "../runtime/calls.js"
import type { AddServiceInput, LocalServicesPolicy } from "../runtime/commands.js"
import type { CallOperations, Operations } from "../runtime/operations.js"
import { toolErrorMessage } from "../records/tool-records.js"
import { ClusterUnavailable, TooMany, ValidationError, type ServiceNotFound } from "../domain/errors.js"
import type { ScopeContext } from "../runtime/host.js"
import { DEFAULT_SEARCH_LIMIT, type ToolSearchIndex } from "../runtime/tool-search.js"
import type { ServiceView } from "../runtime/service-views.js"
import { VERSION } from "../version.js"
import { requestAllowedEverything } from "./authorization.js"
import { answerOfError, contract, errorBody, fromStoreError, NotFound, waitTimeout } from "./contract-errors.js"
import { localServicesPolicy } from "./request-guard.js"
import { authorizeUpstream, type OAuthManager } from "../runtime/upstream-oauth.js"
import { callerWords, currentPrincipal, type Principal } from "./access.js"
import type { AsyncCallAccepted, AsyncCallResponse, AuthorizePayload, CallToolPayload, CallToolResponse, InputRequiredResponse, ListServicesResponse, RecordsQuery, WaitPayload, WaitResponse } from "./payloads.js"
import type { HeldCalls, HeldStep } from "../runtime/input-required.js"
import type { AsyncCalls, AsyncRender } from "../runtime/async-calls.js"
import type { AsyncCallEntry } from "../records/async-results.js"
import { log } from "../logging/log.js"
import { randomUUID } from "node:crypto"
import { sessionOwner } from "./gateway/session-seal.js"

/** The scope a handler acts on: the store's, or an agent's once its id is checked. */
export type ScopeRef = Effect.Effect<ScopeContext, ValidationError>

/** Whether the request being handled may define local (command) services. */
export const localPolicy = (server: ServerOptions) =>
  Effect.flatMap(currentPrincipal, (principal) =>
    Effect.map(HttpServerRequest.HttpServerRequest, (request): LocalServicesPolicy => {
      const policy = localServicesPolicy(server, request)
      return policy === "allowed" && principal.role !== "admin" ? "not-admin" : policy
    })
  )

const firstLine = (text: string): string => text.split("\n", 1)[0] as string

/**
 * A decoded call_tool body as the call pipeline takes it (`arguments` is the alias of `args`; the
 * schema refuses a body with both), with the caller's trace context (its `traceparent` header).
 */
export const callInput = (payload: Schema.Schema.Type<typeof CallToolPayload>, trace: TraceContext | undefined, caller?: CallerOf): CallToolInput => {
  const input = payload.arguments === undefined ? payload : { ...payload, args: payload.arguments }
  const traced = trace === undefined ? input : { ...input, trace }
  return caller === undefined ? traced : { ...traced, caller }
}

/** Who makes a REST call, for an approval it may need: the key in words, and its digest for the per-key cap (and whose per-user credential it uses). */
export const restCaller =
  (principal: Principal, authorization: string | undefined): CallerOf =>
  // Asked only by a call that needs an approval: nothing is computed for the others.
  () => ({ words: callerWords(principal), owner: sessionOwner(principal, authorization) })

/**
 * The body of call_tool and use_tool, built in this one place for every route: the contract's
 * CallToolResponse (checked when compiling), sent as JSON at once, without the schema encoding
 * pass, which for these fields (plain JSON values, no transformations) would return it unchanged.
 */
export const callToolBody = (output: CallToolOutput): Schema.Schema.Encoded<typeof CallToolResponse> => ({
  success: !output.is_error,
  message: output.is_error ? toolErrorMessage(output) : `Tool '${output.tool_name}' called`,
  ...output,
  result_type: "complete"
})

/**
 * What the REST edge knows of a caller: its headers' trace context, and who holds its key (a
 * digest, made when a held call needs it); and the store's held calls.
 */
export interface CallEdge {
  readonly trace: TraceContext | undefined
  readonly owner: () => string
  /** The request came with a key (`Authorization`): a caller's share of the held calls applies. */
  readonly keyed: boolean
  readonly held: HeldCalls
  /** The store's asynchronous calls (`"async": true`). */
  readonly async: AsyncCalls
  /** Who makes the call, for an approval it may need. */
  readonly caller?: CallerOf | undefined
}

/** A call_tool body that takes part in rounds of input (`accept_input_required`, or the retry of one). */
export const takesInput = (payload: Schema.Schema.Type<typeof CallToolPayload>): boolean => payload.accept_input_required === true || payload.request_state !== undefined

/**
 * The call answers of the REST faces (the HttpApi handlers and the direct route), on the call path
 * of the operations (`Calls`), built once when a face is built.
 */
export const callAnswers = (calls: CallOperations) => {
  /**
   * A call whose caller answers its server's requests for input in rounds (src/runtime/input-required.ts):
   * started, or taken back by its `request_state` with the answers; the caller is answered when the
   * call ends or its server asks for input. A caller that goes away while the call runs cancels it.
   */
  const heldCallAnswer = (ctx: ScopeContext, payload: Schema.Schema.Type<typeof CallToolPayload>, edge: CallEdge) =>
    Effect.flatMap(
      Effect.async<HeldStep<CallExit>, ValidationError>((resume) => {
        const owner = { scope: ctx.label, owner: edge.owner(), subject: `tools/call ${payload.tool_name}`, keyed: edge.keyed }
        const retry = payload.request_state === undefined ? undefined : { state: payload.request_state, responses: payload.input_responses ?? {} }
        // Interrupted (the caller went away): the turn's signal cancels the call.
        const gone = new AbortController()
        void edge.held.turn(calls.heldCallRun(ctx, callInput(payload, edge.trace, edge.caller)), owner, { retry, signal: gone.signal }).then((step) => resume(step instanceof ValidationError ? Effect.fail(step) : Effect.succeed(step)))
        return Effect.sync(() => gone.abort())
      }),
      (step): Effect.Effect<Schema.Schema.Encoded<typeof CallToolResponse> | Schema.Schema.Encoded<typeof InputRequiredResponse>, CallToolError> =>
        step._tag === "Ended"
          ? Effect.map(Effect.map(step.exit, calls.callToolOutput), callToolBody)
          : Effect.succeed({
              success: true,
              message: `Tool '${payload.tool_name}' needs input: answer input_requests, then call it again with request_state and input_responses`,
              result_type: "input_required" as const,
              tool_name: payload.tool_name,
              input_requests: step.requests,
              request_state: step.state
            })
    )

  /**
   * call_tool and use_tool as an Effect: the call pipeline (`callTool` of `Calls`) on the scope, its
   * failures mapped by `contract`. The HttpApi handlers run it, and the direct route of
   * src/http/call-route.ts for a call whose scope is not known at once or that takes input in rounds.
   */
  const callToolAnswer = (scope: ScopeRef, payload: Schema.Schema.Type<typeof CallToolPayload>, edge: CallEdge) =>
    contract(
      Effect.flatMap(scope, (ctx) =>
        takesInput(payload) ? heldCallAnswer(ctx, payload, edge) : Effect.map(calls.callTool(ctx, callInput(payload, edge.trace, edge.caller)), callToolBody)
      )
    )

  /** call_tool and use_tool as HttpApi handlers (the request's headers carry the caller's trace context and key). */
  const callTool = (scope: ScopeRef, payload: Schema.Schema.Type<typeof CallToolPayload>, headers: Headers.Headers, store: { readonly held: HeldCalls; readonly asyncCalls: AsyncCalls }) =>
    Effect.flatMap(Effect.zip(currentPrincipal, FiberRef.get(requestSpan)), ([principal, span]) => {
      // The request's span when tracing is on (the call's span is its child), else the caller's context.
      const edge: CallEdge = {
        trace: span ?? readTraceContext(headers),
        owner: () => sessionOwner(principal, headers["authorization"]),
        keyed: headers["authorization"] !== undefined,
        held: store.held,
        async: store.asyncCalls,
        caller: restCaller(principal, headers["authorization"])
      }
      return payload.async === true
        ? Effect.map(asyncCallAnswer(scope, payload, edge), (accepted) => HttpServerResponse.unsafeJson(accepted, { status: 202 }))
        : Effect.map(callToolAnswer(scope, payload, edge), (answer) => HttpServerResponse.unsafeJson(answer))
    })

  /**
   * The answer a synchronous call_tool would have given for a call's exit (its status and body), kept
   * by an asynchronous call: the CallToolResponse, or the contract's error body (the one mapping);
   * undefined when the call was cancelled (nobody was answered).
   */
  const asyncAnswer: AsyncRender = (exit) => {
    if (Exit.isSuccess(exit)) return { http_status: 200, body: callToolBody(calls.callToolOutput(exit.value)) }
    const failure = Cause.failureOption(exit.cause)
    if (Option.isSome(failure)) return answerOfError(fromStoreError(failure.value))
    if (Cause.isInterruptedOnly(exit.cause)) return undefined
    const traceId = randomUUID()
    log.error(`an asynchronous call failed with a defect (trace_id ${traceId}): ${String(Cause.squash(exit.cause))}`, { event: "async_call_defect", trace_id: traceId })
    return { http_status: 500, body: errorBody("INTERNAL_ERROR", `Internal error (trace_id ${traceId}); the server log has the details`, { trace_id: traceId }) }
  }

  /**
   * call_tool with `"async": true`: the call pipeline started detached (src/runtime/async-calls.ts),
   * answered at once (202) with its id; refused (429) at the cap on running asynchronous calls.
   */
  const asyncCallAnswer = (scope: ScopeRef, payload: Schema.Schema.Type<typeof CallToolPayload>, edge: CallEdge) =>
    contract(
      Effect.flatMap(scope, (ctx) =>
        Effect.flatMap(
          Effect.promise(() => edge.async.start(ctx, callInput(payload, edge.trace, edge.caller), edge.owner(), asyncAnswer)),
          (started): Effect.Effect<Schema.Schema.Encoded<typeof AsyncCallAccepted>, TooMany | ClusterUnavailable> => {
            if (started instanceof TooMany || started instanceof ClusterUnavailable) return Effect.fail(started)
            const at = `${scopePrefix(ctx.label)}/calls/${started.call_id}`
            return Effect.succeed({
              success: true,
              message: `Tool '${payload.tool_name}' called asynchronously: read its status at ${at}`,
              call_id: started.call_id,
              status: "running" as const,
              tool_name: payload.tool_name,
              status_url: at,
              cancel_url: `${at}/cancel`
            })
          }
        )
      )
    )

  return { callToolAnswer, callTool, asyncAnswer, asyncCallAnswer }
}

/** The call answers of the REST faces, as `callAnswers` builds them. */
export type CallAnswers = ReturnType<typeof callAnswers>

/** The path prefix of a scope's routes. */
const scopePrefix = (label: string): string => (label === "store" ? "/for_store" : `/for_agent/${encodeURIComponent(label)}`)

/** An asynchronous call as its routes answer it. */
const callView = (entry: AsyncCallEntry): Schema.Schema.Encoded<typeof AsyncCallResponse> => ({
  success: true,
  message:
    entry.status === "running"
      ? `Call ${entry.call_id} of '${entry.tool_name}' is running`
      : `Call ${entry.call_id} of '${entry.tool_name}' ${entry.status}${entry.error === null ? "" : `: ${entry.error}`}`,
  call_id: entry.call_id,
  status: entry.status,
  tool_name: entry.tool_name,
  service_name: entry.service_name,
  started_at: entry.started_at,
  ended_at: entry.ended_at,
  progress: entry.progress,
  answer: entry.answer,
  error: entry.error,
  trace_id: entry.trace_id
})

/** The answer for a call this caller may not see: the same as for an unknown id (its existence is not told). */
const callNotFound = (callId: string) => new NotFound(errorBody("NOT_FOUND", `Asynchronous call '${callId}' not found in this scope for this key`, { call_id: callId }))

/**
 * GET .../calls/{call_id} and POST .../calls/{call_id}/cancel: the call if the scope (`store`, or
 * the agent's id) and the key that started it are the caller's, else 404.
 */
export const asyncCall = (label: string, callId: string, headers: Headers.Headers, calls: AsyncCalls, cancel: boolean) =>
  Effect.flatMap(currentPrincipal, (principal) =>
    Effect.flatMap(
      Effect.promise(() => {
        const owner = sessionOwner(principal, headers["authorization"])
        return cancel ? calls.cancel(callId, label, owner) : calls.view(callId, label, owner)
      }),
      (entry) => (entry === undefined ? Effect.fail(callNotFound(callId)) : Effect.succeed(HttpServerResponse.unsafeJson(callView(entry))))
    )
  )

/**
 * list_services of one or more scopes. Sent as JSON at once, like call_tool: with every agent's
 * services (1,000 and more) the schema encoding pass, which would return the same values, costs
 * more than building the list.
 */
export const listServicesAnswer = (services: ReadonlyArray<ServiceView>) => {
  const answer: Schema.Schema.Encoded<typeof ListServicesResponse> = {
    success: true,
    message: `${services.length} service(s)`,
    services,
    total_services: services.length,
    // Counted from the views already built, not by building every tool object again.
    total_tools: services.reduce((n, s) => n + s.tool_count, 0)
  }
  return HttpServerResponse.unsafeJson(answer)
}

/**
 * search_tools (README, Large catalogs): the tools the caller may call that best match `q`, best
 * first, from the store's one index (src/runtime/tool-search.ts), filtered by the caller's key.
 */
export const searchTools = (scope: ScopeRef, index: ToolSearchIndex, q: string, limit: number | undefined) =>
  contract(
    Effect.map(scope, (ctx) => {
      const hits = index.search(ctx, q, limit ?? DEFAULT_SEARCH_LIMIT)
      return {
        success: true,
        message: `${hits.length} tool(s) match`,
        query: q,
        tools: hits.map((h) => ({ ...h.tool, score: h.score }))
      }
    })
  )

/**
 * authorize_service (src/runtime/upstream-oauth.ts): the URL to open, or the pasted code's outcome.
 * Started by another key than an admin's (an agent's, for its own services), the store's callback
 * asks the person in the browser first, naming that key.
 */
export const authorizeService = (scope: ScopeRef, oauth: OAuthManager, payload: Schema.Schema.Type<typeof AuthorizePayload>) =>
  contract(
    Effect.map(
      Effect.flatMap(Effect.zip(scope, currentPrincipal), ([ctx, who]) => authorizeUpstream(ctx, oauth, payload, undefined, who.role === "admin" ? undefined : callerWords(who))),
      (result) => ({
        success: true,
        message: result.authorization_url !== undefined ? `Open the authorization URL to authorize '${result.service_name}'` : `Service '${result.service_name}' authorized`,
        ...result
      })
    )
  )

/** The REST caller's owner digest (its key's or token's), the same every face computes: whose own connection a `per_user` service's request uses. */
const restOwner = Effect.map(Effect.zip(currentPrincipal, HttpServerRequest.HttpServerRequest), ([principal, request]) => sessionOwner(principal, request.headers["authorization"]))

/**
 * The handlers the store and agent groups share, on the four operation services: built once by
 * each group when its layer is built.
 */
export const scopeHandlers = ({ calls, catalog, commands, queries }: Operations) => {
  const addService = (scope: ScopeRef, payload: AddServiceInput, wait: number | undefined, server: ServerOptions) =>
    contract(
      Effect.gen(function* () {
        const ctx = yield* scope
        const local = yield* localPolicy(server)
        const result = yield* commands.addService(ctx, payload, { local, waitSeconds: wait })
        const parts = [
          result.added.length > 0 ? `added ${result.added.join(", ")}` : "",
          result.updated.length > 0 ? `updated ${result.updated.join(", ")}` : "",
          result.unchanged.length > 0 ? `unchanged ${result.unchanged.join(", ")}` : ""
        ].filter((p) => p !== "")
        const failed = result.failed ?? []
        // Every service failed: not a success, though registered (HTTP 200: the request was carried out).
        const allFailed = failed.length > 0 && failed.length === result.services.length
        const failures = failed.map((f) => `${f.name} is ${f.status}: ${firstLine(f.error)}${f.hint === null ? "" : ` (hint: ${f.hint})`}`).join("; ")
        const message = allFailed
          ? `Services ${parts.join("; ")}, but none connected: ${failures}. The registration${failed.length === 1 ? " is" : "s are"} kept in the services file: fix ${failed.length === 1 ? "it" : "them"} with update_service or remove ${failed.length === 1 ? "it" : "them"} with delete_service`
          : failed.length > 0
            ? `Services ${parts.join("; ")}; connected: ${(result.connected ?? []).join(", ") || "none"}; failed: ${failures}`
            : `Services ${parts.join("; ")}`
        return { success: !allFailed, message, ...result }
      })
    )

  /** list_services of one scope. */
  const listServices = (scope: ScopeRef) => contract(Effect.map(Effect.flatMap(scope, queries.listServices), listServicesAnswer))

  const waitService = (
    scope: ScopeRef,
    payload: Schema.Schema.Type<typeof WaitPayload>,
    context: { readonly context: "store" } | { readonly context: "agent"; readonly agent_id: string }
  ) =>
    Effect.flatMap(
      contract(
        Effect.flatMap(scope, (ctx) =>
          queries.waitService(ctx, { client_id_or_service_name: payload.client_id_or_service_name, status: payload.status, timeout: payload.timeout })
        )
      ),
      (outcome) => {
        const data = {
          client_id_or_service_name: payload.client_id_or_service_name,
          target_status: payload.status,
          timeout: payload.timeout,
          result: outcome.result,
          final_status: outcome.final_status,
          elapsed_ms: outcome.elapsed_ms,
          ...context
        }
        const timedOut = !outcome.result && outcome.final_status !== "deleted"
        const message = outcome.result
          ? "Service wait completed: success"
          : outcome.final_status === "deleted"
            ? "Service wait completed: service deleted"
            : "Service wait completed: timeout"
        if (timedOut && payload.raise_on_timeout) return Effect.fail(waitTimeout(message, data))
        // Sent at once, like call_tool: nothing to encode, and a waiter is answered sooner.
        const answer: Schema.Schema.Encoded<typeof WaitResponse> = { success: outcome.result, message, data }
        return Effect.succeed(HttpServerResponse.unsafeJson(answer))
      }
    )

  const getServiceInfo = (scope: ScopeRef, name: string) =>
    contract(
      Effect.map(
        Effect.flatMap(scope, (ctx) => queries.getServiceInfo(ctx, name)),
        (info) => ({ success: true, message: `Service '${info.service.name}' is ${info.service.status}`, ...info })
      )
    )

  const listTools = (scope: ScopeRef, serviceName: string | undefined) =>
    contract(
      Effect.gen(function* () {
        const ctx = yield* scope
        const tools = yield* queries.listTools(ctx, serviceName)
        // Keyed by service name: a null-prototype record, so "constructor" is a name like any other.
        const tools_by_service = dict<number>()
        for (const t of tools) tools_by_service[t.service_name] = (tools_by_service[t.service_name] ?? 0) + 1
        if (serviceName === undefined) for (const s of yield* queries.listServices(ctx)) tools_by_service[s.name] ??= 0
        else tools_by_service[(yield* ctx.service(serviceName)).getSnapshot().context.name] ??= 0
        return {
          success: true,
          message: `${tools.length} tool(s)`,
          tools,
          total_tools: tools.length,
          services_count: Object.keys(tools_by_service).length,
          tools_by_service
        }
      })
    )

  const checkServices = (scope: ScopeRef) =>
    contract(
      Effect.map(Effect.flatMap(scope, commands.checkServices), (result) => ({
        success: true,
        message: `${result.healthy_count} of ${result.total} service(s) healthy`,
        ...result
      }))
    )

  const deleteService = (scope: ScopeRef, name: string) =>
    contract(
      Effect.map(
        Effect.flatMap(scope, (ctx) => commands.deleteService(ctx, name)),
        (result) => ({ success: true, message: `Service '${result.service_name}' deleted`, ...result })
      )
    )

  /** The scope's part of the services file: secrets masked unless `reveal=true` is asked by a request allowed everything. */
  const showMcpConfig = (scope: ScopeRef, path: string, reveal: boolean | undefined) =>
    contract(
      Effect.gen(function* () {
        const ctx = yield* scope
        const clear = reveal === true && (yield* requestAllowedEverything)
        const config = yield* queries.mcpConfig(ctx, clear)
        return { success: true, message: "Services configuration", config, path }
      })
    )

  const health = (scope: ScopeRef, agentId?: string) =>
    contract(
      Effect.map(Effect.flatMap(scope, queries.health), (h) => ({
        success: true,
        message: `${h.total_services} service(s), ${h.status}`,
        ...h,
        version: VERSION,
        ...(agentId !== undefined ? { agent_id: agentId } : {})
      }))
    )

  const toolRecords = (scope: ScopeRef, query: Schema.Schema.Type<typeof RecordsQuery>, all: boolean) =>
    contract(
      Effect.map(
        Effect.flatMap(scope, (ctx) =>
          queries.toolRecords(
            ctx,
            {
              limit: query.limit ?? 50,
              offset: query.offset ?? 0,
              service_name: query.service_name,
              tool_name: query.tool_name,
              outcome: query.outcome,
              since: query.since !== undefined ? Date.parse(query.since) : undefined
            },
            all
          )
        ),
        (page) => ({ success: true, message: `${page.executions.length} of ${page.total} record(s)`, ...page })
      )
    )

  /** A list of the catalog (resources, templates, prompts): ServiceNotFound for an unknown filter. */
  const catalogList = <A>(scope: ScopeRef, list: (ctx: ScopeContext) => A) =>
    contract(Effect.flatMap(scope, (ctx) => Effect.try({ try: () => list(ctx), catch: (e) => e as ServiceNotFound })))

  const listResources = (scope: ScopeRef, serviceName: string | undefined) =>
    Effect.map(catalogList(scope, (ctx) => catalog.resourceViews(ctx, serviceName)), (resources) => ({
      success: true,
      message: `${resources.length} resource(s)`,
      resources
    }))

  const listResourceTemplates = (scope: ScopeRef, serviceName: string | undefined) =>
    Effect.map(catalogList(scope, (ctx) => catalog.resourceTemplateViews(ctx, serviceName)), (resource_templates) => ({
      success: true,
      message: `${resource_templates.length} resource template(s)`,
      resource_templates
    }))

  const listPrompts = (scope: ScopeRef, serviceName: string | undefined) =>
    Effect.map(catalogList(scope, (ctx) => catalog.promptViews(ctx, serviceName)), (prompts) => ({
      success: true,
      message: `${prompts.length} prompt(s)`,
      prompts
    }))

  const readResource = (scope: ScopeRef, uri: string) =>
    contract(
      Effect.flatMap(Effect.zip(scope, restOwner), ([ctx, owner]) =>
        Effect.map(catalog.readResource(ctx, uri, { owner }), (result) => ({
          success: true,
          message: `Resource '${uri}' read`,
          uri,
          service_name: serviceOf(() => catalog.resolveResource(ctx, uri).actor),
          contents: result.contents as ReadonlyArray<Record<string, unknown>>
        }))
      )
    )

  const getPrompt = (scope: ScopeRef, name: string, args: Readonly<Record<string, string>> | undefined) =>
    contract(
      Effect.flatMap(Effect.zip(scope, restOwner), ([ctx, owner]) =>
        Effect.map(catalog.getPrompt(ctx, name, args, { owner }), (result) => ({
          success: true,
          message: `Prompt '${name}' got`,
          name,
          service_name: serviceOf(() => catalog.resolvePrompt(ctx, name).actor),
          ...(result.description !== undefined ? { description: result.description } : {}),
          messages: result.messages as ReadonlyArray<Record<string, unknown>>
        }))
      )
    )

  return {
    ...callAnswers(calls),
    addService,
    listServices,
    waitService,
    getServiceInfo,
    listTools,
    checkServices,
    deleteService,
    showMcpConfig,
    health,
    toolRecords,
    listResources,
    listResourceTemplates,
    listPrompts,
    readResource,
    getPrompt
  }
}

/** The name of the service an answer came from (it may have left since: then an empty name). */
const serviceOf = (actor: () => { getSnapshot(): { context: { name: string } } }): string => {
  try {
    return actor().getSnapshot().context.name
  } catch {
    return ""
  }
}
