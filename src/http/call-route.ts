/**
 * call_tool and use_tool served straight from node:http: the store's hot path, off the HttpApi
 * router. Through HttpApi a call cost about twice what the rest of the store spends on it (a fiber
 * per request with its middleware chain, the router, the platform's request object, re-reading
 * headers, the body read as a stream); here a call whose scope is known at once (the store's, an
 * existing agent's) runs the call pipeline (`runCall` of the `Calls` service) without a fiber, and
 * its failure is rendered by the one HTTP mapping (`fromStoreError`); any other call runs the
 * handler's Effect (`callToolAnswer`), the same pipeline. The call path and the answers built on it
 * are taken once, with the store, by the server's layer (`DirectCallParts`): nothing is looked up
 * per call.
 *
 * Nothing else changes: the contract stays the one source. The routes, the payload and path
 * schemas are the contract's endpoints (src/http/*\/Api.ts), decoded once with decoders compiled
 * once; the answer's body is built where the HttpApi handler's is (`callToolBody` of
 * src/http/scope-handlers.ts); decode failures and defects go through the same
 * contract middleware (src/http/contract-middleware.ts) and are encoded by their error classes
 * (src/http/contract-errors.ts), with the same headers; every answer is measured as the others are.
 *
 * A request is taken here only when it is plainly in order; anything else goes to the HttpApi app
 * untouched, which answers it in its own words: a refused or malformed Host, any Origin or
 * cross-site fetch (CORS, 403), a missing or wrong API key (401), another content type (415), a
 * body without a Content-Length or over the limit (413), a query string, an agent id that needs
 * percent-decoding, debug logging (the request logger). What it answers itself past that point:
 * a body that is not a JSON object (400, the contract middleware's own words), payload decode
 * failures (400 with the fields), and whatever the handler answers.
 */
import * as HttpApiError from "@effect/platform/HttpApiError"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as HttpServerError from "@effect/platform/HttpServerError"
import { Cause, Effect, Either, Exit, type Fiber, HashSet, Option, type ParseResult, Runtime, Schema } from "effect"
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http"
import { Api } from "./Api.js"
import type { KeyRing } from "../config/api-keys.js"
import type { ProtectedResource } from "./oauth-resource/protected-resource.js"
import { authorize } from "./authorization.js"
import { ADMIN, gateOf, type Principal } from "./access.js"
import type { ToolGate } from "../domain/tool-filter.js"
import { readTraceContext } from "../domain/trace-context.js"
import { openRequestSpan, recordHttpSpan } from "./request-span.js"
import { nestedDeeperThan } from "../domain/json-depth.js"
import { bodyProblem, isJsonMediaType, MAX_BODY_DEPTH } from "./contract-middleware.js"
import * as E from "./contract-errors.js"
import type { RequestPolicy } from "./request-guard.js"
import { callInput, callToolBody, restCaller, takesInput, type CallAnswers, type CallEdge, type ScopeRef } from "./scope-handlers.js"
import { sessionOwner } from "./gateway/session-seal.js"
import type { CallToolPayload } from "./payloads.js"
import type { CallOperations } from "../runtime/operations.js"
import { log } from "../logging/log.js"
import { Cancel } from "../domain/cancellation.js"
import type { ScopeContext } from "../runtime/host.js"
import type { Store } from "../runtime/store.js"

/** What the direct route needs from the server. */
export interface CallRouteOptions {
  readonly policy: RequestPolicy
  /** The keys (src/config/api-keys.ts); undefined: every request is an admin's. */
  readonly keys: KeyRing | undefined
  /** The OAuth protected resource: with a trusted authorization server, no request passes here without a key (a token is HttpApi's to check). */
  readonly resource?: ProtectedResource | undefined
  readonly maxBodyBytes: number
  /** Debug logging logs every request through HttpApi's logger: then nothing is taken here. */
  readonly debug: boolean
  /** The contract middleware around everything the router answers (the same instance). */
  readonly contractErrors: <A, R>(app: Effect.Effect<A, unknown, R>) => Effect.Effect<A, E.ApiError, R>
  /** Every answered request, as the HttpApi path measures it (monitor and metrics). */
  readonly observe: (method: string, status: number, ms: number) => void
}

/**
 * What the route serves calls with, once the store is running: the store, its call path (the
 * `Calls` service, taken from the layer graph once) and the REST call answers built on it.
 */
export interface DirectCallParts {
  readonly store: Store
  readonly calls: CallOperations
  readonly answers: CallAnswers
}

/** A request listener that answers what it takes and returns false for what it leaves to HttpApi. */
export type DirectRoute = (request: IncomingMessage, response: ServerResponse) => boolean

type Payload = Schema.Schema.Type<typeof CallToolPayload>

/** An endpoint of the contract, looked up by group and name: the route serves only what the contract declares. */
const endpoint = (group: string, name: string) => {
  const found = Object.values(Api.groups)
    .find((g) => g.identifier === group)
    ?.endpoints[name]
  if (found === undefined || found.method !== "POST") throw new Error(`call route: the contract has no POST ${group}.${name}`)
  return found
}

/** The call endpoints: the store's two static paths, the agent group's `/for_agent/:agent_id/<name>`. */
const routes = () => {
  const store = ["callTool", "useTool"].map((name) => endpoint("store", name))
  const agent = ["callTool", "useTool"].map((name) => endpoint("agent", name))
  const schemaOf = (e: { readonly payloadSchema: Option.Option<unknown> } | { readonly pathSchema: Option.Option<unknown> }): unknown =>
    Option.getOrThrow("payloadSchema" in e ? e.payloadSchema : e.pathSchema)
  const payloadSchema = schemaOf(store[0]!) as Schema.Schema<Payload, unknown>
  for (const e of [...store, ...agent]) {
    if (schemaOf(e) !== payloadSchema) throw new Error(`call route: ${e.name} at ${e.path} has another payload`)
  }
  const agentPaths = agent.map((e) => {
    const m = /^(\/[^:]+\/):agent_id(\/[^:]+)$/.exec(e.path)
    if (m === null) throw new Error(`call route: unexpected agent path ${e.path}`)
    return { prefix: m[1]!, suffix: m[2]! }
  })
  const pathSchema = schemaOf({ pathSchema: agent[0]!.pathSchema as Option.Option<unknown> }) as Schema.Schema<{ readonly agent_id: string }, unknown>
  return { storePaths: new Set<string>(store.map((e) => e.path)), agentPaths, payloadSchema, pathSchema }
}

/** How an error class of the contract is answered: its status annotation and its compiled encoder. */
interface ErrorAnswer {
  readonly status: number
  readonly encode: (e: unknown) => unknown
}
const ERROR_CLASSES = [
  E.BadRequest,
  E.Unauthorized,
  E.Forbidden,
  E.NotFound,
  E.MethodNotAllowed,
  E.Conflict,
  E.WaitTimeout,
  E.PayloadTooLarge,
  E.UnsupportedMediaType,
  E.TooMany,
  E.InternalError,
  E.BadGateway,
  E.Unavailable,
  E.GatewayTimeout
] as const
const errorAnswers = new Map<unknown, ErrorAnswer>(
  ERROR_CLASSES.map((cls) => [cls, { status: HttpApiSchema.getStatusError(cls), encode: Schema.encodeSync(cls as Schema.Schema<unknown, unknown>) }])
)

/** `retry_after_seconds` of an error body's details as a Retry-After value (1 when absent or malformed). */
export const retryAfterOf = (body: unknown): number => {
  const seconds = (body as { error?: { details?: { retry_after_seconds?: unknown } } } | null)?.error?.details?.retry_after_seconds
  return typeof seconds === "number" && seconds >= 0 ? Math.ceil(seconds) : 1
}

/**
 * The Retry-After of an answer, from its error body: a 429 unless its details say trying again
 * cannot help (`retry_after_seconds` null; 1 s when they name no wait), a 503 when its details name
 * the wait (`retry_after_seconds`: a service's next reconnection attempt); none otherwise. Shared
 * with the HttpApi path (src/http/server.ts).
 */
export const retryAfterHeader = (status: number, body: unknown): string | undefined => {
  const seconds = (body as { error?: { details?: { retry_after_seconds?: unknown } } } | null)?.error?.details?.retry_after_seconds
  if (status === 429) return seconds === null ? undefined : String(retryAfterOf(body))
  if (status !== 503) return undefined
  return typeof seconds === "number" && seconds >= 0 ? String(Math.ceil(seconds)) : undefined
}

/**
 * The status a request whose client went away is counted with (metrics, its span, the access line):
 * 499, as HttpApi's server answers it, never a 5xx: the store did not fail.
 */
export const CLIENT_GONE = 499

/** The status an HttpApi answer's exit is counted with: its response's; `CLIENT_GONE` when its client went away; else 500 (a defect). */
export const statusOfExit = (exit: Exit.Exit<{ readonly status: number }, unknown>): number => {
  if (Exit.isSuccess(exit)) return exit.value.status
  return HashSet.has(Cause.interruptors(exit.cause), HttpServerError.clientAbortFiberId) ? CLIENT_GONE : 500
}

/** Writes a JSON answer with the headers every answer carries (src/http/server.ts), Retry-After on a 429 or 503 (`retryAfterHeader`). */
const send = (response: ServerResponse, status: number, body: string, value: unknown): void => {
  const headers: Record<string, string | number> = {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
    "x-content-type-options": "nosniff"
  }
  if (status === 429 || status === 503) {
    const retry = retryAfterHeader(status, value)
    if (retry !== undefined) headers["retry-after"] = retry
  }
  response.writeHead(status, headers)
  response.end(body)
}

/**
 * Whether a POST to a call route is plainly in order, from its headers alone: its Host allowed, no
 * Origin and no cross-site fetch, a key (when one is needed) whose role reaches the route
 * (src/http/access.ts), a JSON body with a Content-Length within the limit, and no debug logging.
 * Anything else is HttpApi's to answer (401 and 403 with their log lines included).
 */
export const inOrder = (options: Pick<CallRouteOptions, "policy" | "keys" | "resource" | "maxBodyBytes" | "debug">) => {
  const admit = admitted(options)
  return (headers: IncomingHttpHeaders, url = ""): boolean => admit(headers, url) !== undefined
}

/** `inOrder`, giving the request's principal when it is in order (undefined when it is HttpApi's to answer). */
const admitted = (options: Pick<CallRouteOptions, "policy" | "keys" | "resource" | "maxBodyBytes" | "debug">) => {
  return (headers: IncomingHttpHeaders, url = ""): Principal | undefined => {
    if (options.debug || options.policy.hostProblem(headers.host) !== undefined) return undefined
    const site = headers["sec-fetch-site"]
    if (headers.origin !== undefined || site === "cross-site" || site === "same-site") return undefined
    const auth = options.keys === undefined ? { principal: ADMIN } : authorize(options.keys, "POST", url, headers.authorization, true, options.resource)
    if (!("principal" in auth)) return undefined
    const type = headers["content-type"]
    const length = headers["content-length"]
    if (type === undefined || !isJsonMediaType(type) || length === undefined || headers["transfer-encoding"] !== undefined) return undefined
    const bytes = Number(length)
    return bytes > 0 && bytes <= options.maxBodyBytes ? auth.principal : undefined
  }
}

/** Builds the direct route; `runtime` runs the handler Effects (the server's), `running` is read per request (undefined until the store runs). */
export const callRoute = (options: CallRouteOptions, runtime: Runtime.Runtime<never>, running: () => DirectCallParts | undefined): DirectRoute => {
  const { storePaths, agentPaths, payloadSchema, pathSchema } = routes()
  const decodePayload = Schema.decodeUnknownEither(payloadSchema)
  const decodePath = Schema.decodeUnknownEither(pathSchema)
  const takes = admitted(options)
  const runFork = Runtime.runFork(runtime)
  let storeScope: { readonly store: Store; readonly scope: Either.Either<ScopeRef, ParseResult.ParseError> } | undefined

  /** The scope a path names (its parameters decoded by the contract), or undefined when the path is not a call route. */
  const scopeOf = (path: string, current: Store): Either.Either<ScopeRef, ParseResult.ParseError> | undefined => {
    if (storePaths.has(path)) {
      if (storeScope?.store !== current) storeScope = { store: current, scope: Either.right(Effect.succeed(current.forStore().effects)) }
      return storeScope.scope
    }
    for (const { prefix, suffix } of agentPaths) {
      if (!path.startsWith(prefix) || !path.endsWith(suffix)) continue
      const id = path.slice(prefix.length, path.length - suffix.length)
      // The router would percent-decode the id (or refuse it): left to it.
      if (id === "" || id.includes("/") || id.includes("%")) return undefined
      return Either.map(decodePath({ agent_id: id }), (p) => current.agentContext(p.agent_id))
    }
    return undefined
  }

  /**
   * A call whose scope is not known at once (an agent's, still to be created or checked) or whose
   * payload or path the contract refused: the handler's Effect (`callToolAnswer`, the same pipeline
   * as an Effect), in the contract middleware.
   */
  const program = (answers: CallAnswers, scope: Either.Either<ScopeRef, ParseResult.ParseError>, gate: ToolGate | undefined, decoded: Either.Either<Payload, ParseResult.ParseError>, edge: CallEdge) =>
    options.contractErrors(
      Effect.suspend((): Effect.Effect<unknown, unknown> => {
        if (Either.isLeft(scope)) return HttpApiError.HttpApiDecodeError.refailParseError(scope.left)
        if (Either.isLeft(decoded)) return HttpApiError.HttpApiDecodeError.refailParseError(decoded.left)
        const gated = gate === undefined ? scope.right : Effect.map(scope.right, (ctx) => ctx.gated(gate))
        return decoded.right.async === true ? answers.asyncCallAnswer(gated, decoded.right, edge) : answers.callToolAnswer(gated, decoded.right, edge)
      })
    )

  /** The scope of a call when it is known at once (the store's, or an existing agent's): the call then runs without a fiber. */
  const scopeNow = (scope: Either.Either<ScopeRef, ParseResult.ParseError>): ScopeContext | undefined => {
    if (Either.isLeft(scope) || !Exit.isExit(scope.right)) return undefined
    const ctx = scope.right as Exit.Exit<ScopeContext, unknown>
    return Exit.isSuccess(ctx) ? ctx.value : undefined
  }

  const answerError = (response: ServerResponse, e: unknown): number => {
    const answer = errorAnswers.get((e as object | null)?.constructor)
    if (answer === undefined) {
      // Not a contract error: cannot happen (the contract middleware maps everything), answered as a bug.
      const body = E.errorBody("INTERNAL_ERROR", "Internal error; the server log has the details", {})
      send(response, 500, JSON.stringify(body), body)
      return 500
    }
    const body = answer.encode(e)
    send(response, answer.status, JSON.stringify(body), body)
    return answer.status
  }

  /** The route template of a call route's path (an agent's id as `:agent_id`). */
  const routeOf = (path: string): string => {
    if (storePaths.has(path)) return path
    const agent = agentPaths.find(({ prefix, suffix }) => path.startsWith(prefix) && path.endsWith(suffix))
    return agent === undefined ? path : `${agent.prefix}:agent_id${agent.suffix}`
  }

  return (request, response) => {
    const url = request.url ?? ""
    const parts = running()
    if (parts === undefined || request.method !== "POST") return false
    const current = parts.store
    const scope = scopeOf(url, current)
    if (scope === undefined) return false
    const principal = takes(request.headers, url)
    if (principal === undefined) return false
    // The key's tool allow-list (an agent key's `tools`), compiled once per list.
    const gate = gateOf(principal)

    const started = performance.now()
    let status = 500
    // Tracing on: the request's span (its parent the caller's `traceparent`), recorded when it is answered.
    const tracer = current.tracer
    const caller = readTraceContext(request.headers)
    const span = tracer.enabled ? openRequestSpan(caller) : undefined
    const done = () => {
      options.observe("POST", status, performance.now() - started)
      if (span !== undefined) recordHttpSpan(tracer, span, { method: "POST", route: routeOf(url), path: url, status, startMs: started })
    }

    let fiber: Fiber.RuntimeFiber<unknown, E.ApiError> | undefined
    let cancel: Cancel | undefined
    let closed = false
    // The client went away: its handler is interrupted (its call cancelled), as HttpApi's server does,
    // and the request counted 499 as that server answers it (`CLIENT_GONE`), not as the store's failure.
    response.once("close", () => {
      if (!response.writableEnded) {
        closed = true
        status = CLIENT_GONE
        cancel?.abort()
        fiber?.unsafeInterruptAsFork(HttpServerError.clientAbortFiberId)
        if (fiber === undefined) done()
      }
    })
    /** Answers the exit of the handler's Effect (or of a failed direct call through the same contract mapping). */
    let success = 200
    const answer = (exit: Exit.Exit<unknown, E.ApiError>) => {
      try {
        if (Exit.isSuccess(exit)) {
          status = success
          send(response, success, JSON.stringify(exit.value), exit.value)
        } else if (!Cause.isInterruptedOnly(exit.cause)) {
          const failure = Cause.failureOption(exit.cause)
          status = answerError(response, Option.isSome(failure) ? failure.value : undefined)
        }
      } catch (e) {
        // An answer that cannot be written (a bug): a 500 rather than a client left waiting.
        log.error(`a call's answer could not be written: ${e instanceof Error ? e.message : String(e)}`, { event: "call_answer_failed" })
        if (!response.headersSent) status = answerError(response, undefined)
        else response.destroy()
      }
      done()
    }

    const chunks: Buffer[] = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.once("error", () => undefined) // a body cut short: nobody to answer
    request.once("end", () => {
      const text = chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8")
      let value: unknown
      try {
        value = JSON.parse(text)
      } catch {
        value = undefined
      }
      if (typeof value !== "object" || value === null || Array.isArray(value) || nestedDeeperThan(value, MAX_BODY_DEPTH)) {
        status = answerError(response, bodyProblem(text, url))
        return done()
      }
      const decoded = decodePayload(value)
      const ctx = scopeNow(scope)
      const trace = span ?? caller
      // A call that takes input in rounds, runs asynchronously (answered 202), or whose scope or payload needs the handler's Effect.
      if (ctx === undefined || Either.isLeft(decoded) || takesInput(decoded.right) || decoded.right.async === true) {
        if (Either.isRight(decoded) && decoded.right.async === true) success = 202
        const edge: CallEdge = { trace, owner: () => sessionOwner(principal, request.headers.authorization), keyed: request.headers.authorization !== undefined, held: current.held, async: current.asyncCalls, caller: restCaller(principal, request.headers.authorization) }
        fiber = runFork(program(parts.answers, scope, gate, decoded, edge))
        fiber.addObserver(answer)
        return
      }
      // The call's pipeline, run at once (`runCall` of the call path); its failures rendered by the one HTTP mapping.
      const calls = parts.calls
      cancel = new Cancel()
      void calls.runCall(ctx.gated(gate), callInput(decoded.right, trace, restCaller(principal, request.headers.authorization)), cancel).then((exit) => {
        if (closed) return // answered by the close: interrupted, nobody to answer
        if (Exit.isSuccess(exit)) return answer(Exit.succeed(callToolBody(calls.callToolOutput(exit.value))))
        const failure = Cause.failureOption(exit.cause)
        if (Option.isSome(failure)) return answer(Exit.fail(E.fromStoreError(failure.value)))
        // A defect (a bug): logged and answered 500 with a trace id by the contract middleware.
        fiber = runFork(options.contractErrors(Exit.isInterrupted(exit) ? Effect.die(new Error("the call was interrupted")) : exit))
        fiber.addObserver(answer)
      })
    })
    return true
  }
}
