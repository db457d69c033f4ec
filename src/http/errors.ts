/**
 * Every HTTP error of the API, in one place: the contract's error classes (one body shape, a real
 * status; shared/API.md, Conventions), the mapping from the store's errors to them, and the
 * API-level middleware that turns the framework's own failures (malformed JSON, schema decode
 * errors, unknown routes, wrong methods, wrong content types, oversized bodies) into the same body.
 */
import { HttpApiError, HttpApiSchema, HttpServerError, HttpServerRequest, HttpMethod, type HttpServerResponse } from "@effect/platform"
import * as IncomingMessage from "@effect/platform/HttpIncomingMessage"
import { Cause, Context, Effect, Option, ParseResult, Schema } from "effect"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { createHash, randomUUID, timingSafeEqual } from "node:crypto"
import { isStoreError, type StoreError } from "../runtime/errors.js"

/**
 * The error body of shared/API.md. Each class lists its own codes: that makes the classes tell
 * apart when the API encodes a failure (the union picks the first class that accepts the value).
 */
const errorFields = <const Codes extends ReadonlyArray<string>>(...codes: Codes) => ({
  success: Schema.Literal(false),
  message: Schema.String,
  error: Schema.Struct({
    code: Schema.Literal(...codes),
    message: Schema.String,
    details: Schema.Record({ key: Schema.String, value: Schema.Unknown })
  })
})

type Details = Record<string, unknown>

/** Builds the body fields of an error (the one error body of shared/API.md). */
export const errorBody = <C extends string>(code: C, message: string, details: Details = {}) =>
  ({ success: false as const, message, error: { code, message, details } })

export class BadRequest extends Schema.Class<BadRequest>("BadRequest")(errorFields("VALIDATION_ERROR", "AMBIGUOUS_TOOL", "INVALID_ARGUMENTS"), HttpApiSchema.annotations({ status: 400, description: "VALIDATION_ERROR, AMBIGUOUS_TOOL or INVALID_ARGUMENTS" })) {}
export class Unauthorized extends Schema.Class<Unauthorized>("Unauthorized")(errorFields("UNAUTHORIZED"), HttpApiSchema.annotations({ status: 401, description: "UNAUTHORIZED" })) {}
export class Forbidden extends Schema.Class<Forbidden>("Forbidden")(errorFields("FORBIDDEN", "FORBIDDEN_HOST", "FORBIDDEN_ORIGIN", "TOOL_NOT_ALLOWED"), HttpApiSchema.annotations({ status: 403, description: "FORBIDDEN, FORBIDDEN_HOST, FORBIDDEN_ORIGIN or TOOL_NOT_ALLOWED" })) {}
export class NotFound extends Schema.Class<NotFound>("NotFound")(errorFields("NOT_FOUND", "SERVICE_NOT_FOUND", "TOOL_NOT_FOUND"), HttpApiSchema.annotations({ status: 404, description: "NOT_FOUND, SERVICE_NOT_FOUND or TOOL_NOT_FOUND" })) {}
export class MethodNotAllowed extends Schema.Class<MethodNotAllowed>("MethodNotAllowed")(errorFields("METHOD_NOT_ALLOWED"), HttpApiSchema.annotations({ status: 405, description: "METHOD_NOT_ALLOWED" })) {}
export class WaitTimeout extends Schema.Class<WaitTimeout>("WaitTimeout")(errorFields("WAIT_TIMEOUT"), HttpApiSchema.annotations({ status: 408, description: "WAIT_TIMEOUT" })) {}
export class PayloadTooLarge extends Schema.Class<PayloadTooLarge>("PayloadTooLarge")(errorFields("PAYLOAD_TOO_LARGE"), HttpApiSchema.annotations({ status: 413, description: "PAYLOAD_TOO_LARGE" })) {}
export class UnsupportedMediaType extends Schema.Class<UnsupportedMediaType>("UnsupportedMediaType")(errorFields("UNSUPPORTED_MEDIA_TYPE"), HttpApiSchema.annotations({ status: 415, description: "UNSUPPORTED_MEDIA_TYPE" })) {}
export class TooMany extends Schema.Class<TooMany>("TooMany")(errorFields("TOO_MANY"), HttpApiSchema.annotations({ status: 429, description: "TOO_MANY: a cap was reached; Retry-After says when to try again" })) {}
export class InternalError extends Schema.Class<InternalError>("InternalError")(errorFields("INTERNAL_ERROR"), HttpApiSchema.annotations({ status: 500, description: "INTERNAL_ERROR: a bug, never bad input" })) {}
export class BadGateway extends Schema.Class<BadGateway>("BadGateway")(errorFields("UPSTREAM_ERROR"), HttpApiSchema.annotations({ status: 502, description: "UPSTREAM_ERROR" })) {}
export class Unavailable extends Schema.Class<Unavailable>("Unavailable")(errorFields("SERVICE_UNAVAILABLE"), HttpApiSchema.annotations({ status: 503, description: "SERVICE_UNAVAILABLE" })) {}
export class GatewayTimeout extends Schema.Class<GatewayTimeout>("GatewayTimeout")(errorFields("TOOL_TIMEOUT"), HttpApiSchema.annotations({ status: 504, description: "TOOL_TIMEOUT" })) {}

/** Every error an endpoint can answer with. */
export type ApiError =
  | BadRequest
  | Unauthorized
  | Forbidden
  | NotFound
  | MethodNotAllowed
  | WaitTimeout
  | PayloadTooLarge
  | UnsupportedMediaType
  | TooMany
  | InternalError
  | BadGateway
  | Unavailable
  | GatewayTimeout

export const validationError = (message: string, fields: ReadonlyArray<{ field: string; problem: string }>) =>
  new BadRequest(errorBody("VALIDATION_ERROR", message, { fields }))

export const waitTimeout = (message: string, details: Details) => new WaitTimeout(errorBody("WAIT_TIMEOUT", message, details))

/** Maps a store error to its contract error. */
export const fromStoreError = (e: StoreError): BadRequest | Forbidden | NotFound | TooMany | BadGateway | Unavailable | GatewayTimeout => {
  switch (e._tag) {
    case "ValidationError":
      return validationError(e.message, e.problems)
    case "ServiceNotFound":
      return new NotFound(errorBody("SERVICE_NOT_FOUND", e.message, { service_name: e.name, scope: e.scope }))
    case "ToolNotFound":
      return new NotFound(errorBody("TOOL_NOT_FOUND", e.message, { tool_name: e.toolName, scope: e.scope }))
    case "AmbiguousTool":
      return new BadRequest(errorBody("AMBIGUOUS_TOOL", e.message, { tool_name: e.toolName, candidates: e.candidates }))
    case "InvalidArguments":
      return new BadRequest(errorBody("INVALID_ARGUMENTS", e.message, { tool_name: e.toolName, fields: e.problems, upstream: e.upstream }))
    case "UpstreamError":
      return new BadGateway(errorBody("UPSTREAM_ERROR", e.message, { outcome: e.outcome, service_name: e.serviceName, code: e.code ?? null }))
    case "ServiceUnavailable":
      return new Unavailable(
        errorBody("SERVICE_UNAVAILABLE", e.message, {
          service_name: e.serviceName,
          status: e.status,
          next_retry_at: e.nextRetryAt,
          last_error: e.lastError
        })
      )
    case "ToolTimeout":
      return new GatewayTimeout(errorBody("TOOL_TIMEOUT", e.message, { tool_name: e.toolName, timeout: e.timeoutSeconds }))
    case "TooMany":
      return new TooMany(errorBody("TOO_MANY", e.message, { limit: e.limit, max: e.max, retry_after_seconds: e.retryAfterSeconds }))
    case "Forbidden":
      return new Forbidden(errorBody("FORBIDDEN", e.message))
  }
}

/** A store error as its contract error; anything else is a bug, logged as a defect. */
const failure = (e: unknown): Effect.Effect<never, ReturnType<typeof fromStoreError> | InternalError> =>
  isStoreError(e) ? Effect.fail(fromStoreError(e)) : logInternal("unexpected failure", Cause.die(e))

/**
 * A bug: the details (messages, errno text, file paths) go to the log only, under a trace id; the
 * client gets a generic message with the same id, so an operator can find the log line.
 */
const logInternal = (what: string, cause: Cause.Cause<unknown>): Effect.Effect<never, InternalError> => {
  const traceId = randomUUID()
  return Effect.logError(`${what} (trace_id ${traceId})`, cause).pipe(
    Effect.zipRight(Effect.fail(new InternalError(errorBody("INTERNAL_ERROR", `Internal error (trace_id ${traceId}); the server log has the details`, { trace_id: traceId }))))
  )
}

const isPromiseLike = (v: unknown): v is PromiseLike<unknown> =>
  typeof v === "object" && v !== null && typeof (v as { then?: unknown }).then === "function"

/**
 * Runs a store operation from a handler: store errors become contract errors; anything else is a
 * bug, logged as a defect. An operation that takes the AbortSignal gets one that fires if the
 * client goes away (the fiber is interrupted); one that takes no argument gets none (an
 * AbortController per request is not free), and when it answers synchronously it runs without an
 * asynchronous step at all.
 */
export const run = <A>(
  operation: (signal: AbortSignal) => Promise<A> | A
): Effect.Effect<A, ReturnType<typeof fromStoreError> | InternalError> => {
  const settle = (value: PromiseLike<A>) =>
    Effect.async<A, ReturnType<typeof fromStoreError> | InternalError>((resume) => {
      value.then(
        (a) => resume(Effect.succeed(a)),
        (e) => resume(failure(e))
      )
    })
  if (operation.length === 0) {
    return Effect.suspend(() => {
      let value: Promise<A> | A
      try {
        value = operation(undefined as never)
      } catch (e) {
        return failure(e)
      }
      return isPromiseLike(value) ? settle(value) : Effect.succeed(value)
    })
  }
  // A register function of two parameters makes Effect create the AbortController and abort it on interruption.
  return Effect.async<A, ReturnType<typeof fromStoreError> | InternalError>((resume, signal) => {
    try {
      Promise.resolve(operation(signal)).then(
        (a) => resume(Effect.succeed(a)),
        (e) => resume(failure(e))
      )
    } catch (e) {
      resume(failure(e))
    }
  })
}

/** Describes a schema decode failure field by field, in words a client can act on. */
const decodeProblems = (e: HttpApiError.HttpApiDecodeError) =>
  e.issues.map((issue) => {
    const field = issue.path.length > 0 ? issue.path.map(String).join(".") : "body"
    if (issue._tag === "Missing") return { field, problem: "is required" }
    if (issue._tag === "Unexpected") return { field, problem: "is not allowed" }
    if (issue.path.length === 0 && issue._tag === "Type") return { field, problem: "must be a JSON object with this endpoint's fields" }
    return { field, problem: issue.message }
  })


/**
 * Deepest nesting of arrays and objects a body may have. The schema decoder, its error formatter
 * and JSON.stringify (records, upstream requests) all recurse: a 10 KB body of nested arrays
 * overflows the stack. Refused before decoding, like malformed JSON.
 */
export const MAX_BODY_DEPTH = 64

/** Whether a parsed JSON value nests deeper than `limit` (iterative: never overflows itself). */
const nestedDeeperThan = (value: unknown, limit: number): boolean => {
  const stack: Array<readonly [unknown, number]> = [[value, 1]]
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!
    if (typeof v !== "object" || v === null) continue
    if (depth > limit) return true
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, depth + 1])
  }
  return false
}

/**
 * The request's path as the router sees it. Not `new URL(url, base)`: that reads "//x/y" as a host
 * "x" and path "/y" (so "//for_store/health" looked like the open "/health"), and throws on "//".
 */
const pathOf = (url: string): string => {
  const end = url.search(/[?#]/)
  return end === -1 ? url : url.slice(0, end)
}
const tooLarge = (limit: number) => new PayloadTooLarge(errorBody("PAYLOAD_TOO_LARGE", `Request body is over ${limit} bytes`, { limit }))

/** The body read so far, or why it was not: over the limit, or the client went away. */
type BodyRead = { readonly text: string } | { readonly tooLarge: true } | { readonly failed: Error }

/**
 * Reads a request body, counting bytes as they arrive: past `limit` reading stops at once (the
 * rest is never buffered; the answer, 413, closes the connection). Effect's own reader would
 * destroy the socket at its limit, leaving the client with no answer.
 */
const readBody = (request: HttpServerRequest.HttpServerRequest, limit: number): Effect.Effect<BodyRead> =>
  Effect.async<BodyRead>((resume) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    const chunks: Buffer[] = []
    let bytes = 0
    const done = (result: BodyRead) => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
      resume(Effect.succeed(result))
    }
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > limit) {
        source.pause()
        return done({ tooLarge: true })
      }
      chunks.push(chunk)
    }
    const onEnd = () => done({ text: Buffer.concat(chunks, bytes).toString("utf8") })
    const onError = (e: Error) => done({ failed: e })
    source.on("data", onData)
    source.once("end", onEnd)
    source.once("error", onError)
    return Effect.sync(() => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
    })
  })

/**
 * Hands a body read by `readBody` to the framework, which reads it again to decode the payload:
 * the Node request caches its text in `textEffect` (platform-node's HttpIncomingMessageImpl, an
 * internal field: test/http/body-limits.test.ts fails if a new version drops it).
 */
const canProvideText = (request: HttpServerRequest.HttpServerRequest): boolean => "textEffect" in request
const provideText = (request: HttpServerRequest.HttpServerRequest, text: string): void => {
  ;(request as { textEffect?: unknown }).textEffect = Effect.succeed(text)
}

/**
 * Whether a media type is JSON: exactly `application/json`, parameters allowed. Not a substring
 * test: `text/plain; charset=application/json` is what a web page may send without a preflight.
 */
const isJsonMediaType = (type: string): boolean => type.split(";", 1)[0]!.trim().toLowerCase() === "application/json"

/** Routes whose body may be a JSON array: add_service's list form, and JSON-RPC on the MCP endpoints. */
const arrayBodyAllowed = (path: string): boolean => /\/add_service\/?$/.test(path) || /^(\/for_agent\/[^/]+)?\/mcp\/?$/.test(path)

/** Compares a bearer token with the key in constant time (hashes of equal length). */
const bearerCheck = (key: string) => {
  const expected = createHash("sha256").update(key).digest()
  return (header: string | undefined): boolean => {
    // Auth scheme names are case-insensitive (RFC 9110).
    const token = header !== undefined && /^bearer /i.test(header) ? header.slice(7) : ""
    return timingSafeEqual(createHash("sha256").update(token).digest(), expected)
  }
}

/** A route table entry: method and path pattern, e.g. `DELETE /for_store/delete_service/:service_name`. */
export interface RouteEntry {
  readonly method: string
  readonly path: string
}

const patternOf = (path: string) => new RegExp(`^${path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/:[A-Za-z_]+/g, "[^/]+")}/?$`)

/**
 * Why the router found no route for a path that has a route's shape and method: find-my-way drops
 * a match whose parameter is not valid percent-encoding (or longer than its maxParamLength), and
 * the request would otherwise be answered 405 with the very method it used.
 */
const refusedParameter = (routes: ReadonlyArray<RouteEntry>, method: string, path: string): { field: string; problem: string } => {
  const segments = path.split("/")
  for (const route of routes) {
    const parts = route.path.split("/")
    if (route.method !== method || parts.length !== segments.length) continue
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i] as string
      if (!part.startsWith(":")) continue
      try {
        decodeURIComponent(segments[i] as string)
      } catch {
        return { field: part.slice(1), problem: "is not valid percent-encoded UTF-8" }
      }
    }
  }
  return { field: "path", problem: "has a parameter that cannot be read (too long or badly encoded)" }
}

/**
 * The API-level middleware: checks content type and size and parses JSON before routing (so a
 * malformed body is a 400, not a defect), and maps routing and decoding failures to the contract.
 */
export const contractMiddleware = (
  routes: ReadonlyArray<RouteEntry>,
  options: { readonly apiKey?: string | undefined; readonly maxBodyBytes: number }
) => {
  const patterns = routes.map((r) => ({ method: r.method, pattern: patternOf(r.path) }))
  const authorized = options.apiKey === undefined ? () => true : bearerCheck(options.apiKey)
  // GET /health is for liveness probes; GET /ui is a static page that asks for the key itself.
  const open = (request: HttpServerRequest.HttpServerRequest) => {
    if (options.apiKey === undefined || request.method !== "GET") return options.apiKey === undefined
    const path = pathOf(request.url)
    return path === "/health" || path === "/ui"
  }
  const unauthorized = () =>
    Effect.fail(new Unauthorized(errorBody("UNAUTHORIZED", "Missing or wrong API key: send 'Authorization: Bearer <key>'", {})))
  const maxBodyBytes = options.maxBodyBytes
  /**
   * The content type of a request that may carry a body: when a body is sent, or any content type
   * is named, it must be JSON (a web page can send any other type without a preflight).
   */
  const mediaTypeProblem = (type: string | undefined, length: string | undefined, chunked: boolean): ApiError | undefined => {
    const hasBody = chunked || (length !== undefined && length !== "0")
    if (type === undefined ? !hasBody : isJsonMediaType(type)) return undefined
    const message = type === undefined ? "A request body needs 'Content-Type: application/json'" : `Content-Type must be application/json, not '${type.slice(0, 100)}'`
    return new UnsupportedMediaType(errorBody("UNSUPPORTED_MEDIA_TYPE", message, { content_type: type ?? null }))
  }
  /** The body checks: well-formed JSON, an object (or an array where allowed), nesting depth. Undefined when it passes. */
  const bodyProblem = (text: string, path: string): ApiError | undefined => {
    if (text.length === 0) return undefined
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch (e) {
      return validationError(`Malformed JSON body: ${(e as Error).message}`, [{ field: "body", problem: "is not valid JSON" }])
    }
    if (typeof parsed !== "object" || parsed === null || (Array.isArray(parsed) && !arrayBodyAllowed(path))) {
      const problem = `must be a JSON object${arrayBodyAllowed(path) ? " or array" : ""}, not ${parsed === null ? "null" : Array.isArray(parsed) ? "an array" : typeof parsed === "string" ? "a string" : typeof parsed === "number" ? "a number" : "a boolean"}`
      return validationError(`Invalid request: body ${problem}`, [{ field: "body", problem }])
    }
    if (nestedDeeperThan(parsed, MAX_BODY_DEPTH)) {
      const problem = `nests arrays and objects deeper than ${MAX_BODY_DEPTH} levels`
      return validationError(`Invalid request: body ${problem}`, [{ field: "body", problem }])
    }
    return undefined
  }
  /** Routing and decoding failures in the contract's terms; anything else is already a contract error. */
  const contractError = (e: unknown): ApiError => {
    if (e instanceof HttpApiError.HttpApiDecodeError) {
      const fields = decodeProblems(e)
      return validationError(`Invalid request: ${fields.map((p) => `${p.field}: ${p.problem}`).join("; ")}`, fields)
    }
    if (e instanceof HttpServerError.RouteNotFound) {
      const path = pathOf(e.request.url)
      const allowed = patterns.filter((p) => p.pattern.test(path)).map((p) => p.method)
      if (allowed.includes(e.request.method)) {
        const refused = refusedParameter(routes, e.request.method, path)
        return validationError(`Invalid request: ${refused.field} ${refused.problem}`, [refused])
      }
      return allowed.length > 0
        ? new MethodNotAllowed(errorBody("METHOD_NOT_ALLOWED", `Method ${e.request.method} is not allowed on ${path}; use ${allowed.join(", ")}`, { allowed }))
        : new NotFound(errorBody("NOT_FOUND", `No route ${e.request.method} ${path}`, { path }))
    }
    // Anything else is already a contract error (or a failure the framework encodes itself).
    return e as ApiError
  }
  const onCause = (cause: Cause.Cause<unknown>): Effect.Effect<never, ApiError> => {
    const failed = Cause.failureOption(cause)
    if (Option.isSome(failed)) return Effect.fail(contractError(failed.value))
    // Request decoding fails as HttpApiDecodeError (above). A ParseError defect comes from encoding
    // the answer (a response that does not fit its schema): the server's fault, never the client's.
    const defect = Cause.dieOption(cause)
    if (Option.isSome(defect)) {
      return logInternal(ParseResult.isParseError(defect.value) ? "response does not match its schema" : "unexpected defect", Cause.die(defect.value))
    }
    return Effect.failCause(cause as Cause.Cause<never>)
  }
  // Written with plain combinators, not a generator: this runs on every request.
  return <R>(app: Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, R>) =>
    Effect.catchAllCause(
      Effect.withFiberRuntime((fiber): Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, R> => {
        const request = Context.unsafeGet(fiber.currentContext, HttpServerRequest.HttpServerRequest)
        if (!open(request) && !authorized(request.headers["authorization"])) return unauthorized()
        if (!HttpMethod.hasBody(request.method)) return app
        // Each read of `request.headers` builds a new Headers object: read it once.
        const headers = request.headers
        const length = headers["content-length"]
        const chunked = headers["transfer-encoding"] !== undefined
        const typeProblem = mediaTypeProblem(headers["content-type"], length, chunked)
        if (typeProblem !== undefined) return Effect.fail(typeProblem)
        if (Number(length ?? "0") > maxBodyBytes) return Effect.fail(tooLarge(maxBodyBytes))
        if (length === undefined && !chunked) return app
        const checked = (text: string) => {
          const problem = bodyProblem(text, pathOf(request.url))
          return problem === undefined ? app : Effect.fail(problem)
        }
        if (!canProvideText(request)) {
          // Not the Node request this was written for: the framework's reader, bounded (past the
          // limit it resets the connection instead of answering 413).
          return Effect.flatMap(
            IncomingMessage.withMaxBodySize(request.text, Option.some(maxBodyBytes)).pipe(Effect.mapError(() => tooLarge(maxBodyBytes))),
            checked
          )
        }
        return Effect.flatMap(readBody(request, maxBodyBytes), (read) => {
          if ("tooLarge" in read) return Effect.fail(tooLarge(maxBodyBytes))
          if ("failed" in read) return Effect.interrupt // the client went away mid-body: nobody to answer
          provideText(request, read.text)
          return checked(read.text)
        })
      }),
      onCause
    )
}
