// Checks of option values and monitoring settings: defaults, accepted ranges and error messages.
import { describe, expect, it } from "vitest"
import {
  checkOption,
  checkOptionValues,
  mergeOptionValues,
  MONITORING_KEYS,
  optionFromText,
  OptionsError,
  resolveMonitoring,
  resolveOptions
} from "../../src/config/options.js"

const refusal = (f: () => unknown): OptionsError => {
  try {
    f()
  } catch (e) {
    expect(e).toBeInstanceOf(OptionsError)
    return e as OptionsError
  }
  throw new Error("expected an OptionsError")
}

describe("resolveMonitoring", () => {
  it("fills in the defaults of docs/lifecycle.md", () => {
    const m = resolveMonitoring({})
    expect(m.health_check_seconds).toBe(30)
    expect(m.warning_check_seconds).toBe(10)
    expect(m.tools_update_hours).toBe(2)
    expect(m.reconnection_seconds).toBe(60)
    expect(m.cleanup_hours).toBe(24)
    expect(m.enable_tools_update).toBe(true)
    expect(m.enable_reconnection).toBe(true)
    expect(m.update_tools_on_reconnection).toBe(true)
    expect(m.ping_timeout_seconds).toBe(5)
    expect(m.slow_response_ms).toBe(3000)
    expect(m.initialization_timeout_seconds).toBe(60)
    expect(m.reconnecting_failure_threshold).toBe(2)
    expect(m.max_reconnect_attempts).toBe(10)
    expect(m.unreachable_retry_seconds).toBe(300)
    expect(m.disconnection_timeout_seconds).toBe(10)
    expect(Object.keys(m).sort()).toEqual([...MONITORING_KEYS].sort())
    expect(resolveMonitoring(undefined)).toEqual(m)
  })

  it("makes warning_check_seconds follow health_check_seconds unless given, and accepts fractions", () => {
    expect(resolveMonitoring({ health_check_seconds: 4 }).warning_check_seconds).toBe(4)
    expect(resolveMonitoring({ health_check_seconds: 0.2 }).warning_check_seconds).toBe(0.2)
    expect(resolveMonitoring({ health_check_seconds: 60 }).warning_check_seconds).toBe(10)
    expect(resolveMonitoring({ health_check_seconds: 60, warning_check_seconds: 25 }).warning_check_seconds).toBe(25)
    expect(resolveMonitoring({ enable_reconnection: false, max_reconnect_attempts: 3 })).toMatchObject({
      enable_reconnection: false,
      max_reconnect_attempts: 3,
      health_check_seconds: 30
    })
  })

  it("names the key and the allowed range of a bad value", () => {
    expect(refusal(() => resolveMonitoring({ health_check_seconds: "x" })).message).toBe(
      'monitoring.health_check_seconds must be a number > 0 and <= 2147483 (seconds, fractions allowed) (got "x")'
    )
    const zero = refusal(() => resolveMonitoring({ tools_update_hours: 0 }))
    expect(zero.option).toBe("monitoring.tools_update_hours")
    expect(zero.message).toContain("must be a number > 0")
    expect(refusal(() => resolveMonitoring({ slow_response_ms: -5 })).option).toBe("monitoring.slow_response_ms")
    expect(refusal(() => resolveMonitoring({ tools_update_hours: 1000 })).message).toContain("<= 596 (hours")
    const count = refusal(() => resolveMonitoring({ max_reconnect_attempts: 2.5 }))
    expect(count.message).toBe("monitoring.max_reconnect_attempts must be an integer >= 1 (got 2.5)")
    expect(refusal(() => resolveMonitoring({ reconnecting_failure_threshold: 0 })).option).toBe(
      "monitoring.reconnecting_failure_threshold"
    )
    expect(refusal(() => resolveMonitoring({ enable_reconnection: "false" })).message).toBe(
      'monitoring.enable_reconnection must be true or false (got "false")'
    )
    expect(refusal(() => resolveMonitoring({ ping_timeout_seconds: null })).option).toBe("monitoring.ping_timeout_seconds")
  })

  it("refuses unknown keys and a non-object", () => {
    const unknown = refusal(() => resolveMonitoring({ health_check_second: 5 }))
    expect(unknown.option).toBe("monitoring.health_check_second")
    expect(unknown.message).toContain('no key "health_check_second"')
    expect(unknown.message).toContain("health_check_seconds")
    expect(refusal(() => resolveMonitoring([1])).option).toBe("monitoring")
    expect(refusal(() => resolveMonitoring("x", "--monitoring")).message).toBe('--monitoring: monitoring must be an object (got "x")')
  })

  it("refuses every key given a wrong type", () => {
    for (const key of MONITORING_KEYS) {
      expect(refusal(() => resolveMonitoring({ [key]: [] })).option).toBe(`monitoring.${key}`)
    }
  })
})

describe("checkOption", () => {
  it("accepts good values", () => {
    expect(checkOption("port", 0)).toBe(0)
    expect(checkOption("port", 65535)).toBe(65535)
    expect(checkOption("log_level", "WARN")).toBe("warning")
    expect(checkOption("tool_record_max_file_size", -1)).toBe(-1)
    expect(checkOption("tool_record_max_file_size", 0.5)).toBe(0.5)
    expect(checkOption("tool_record_retention_days", -1)).toBe(-1)
    expect(checkOption("tool_record_retention_days", 14)).toBe(14)
  })

  it.each([
    ["port", 65536, "port must be an integer from 0 to 65535 (got 65536)"],
    ["port", 8.5, "port must be an integer from 0 to 65535 (got 8.5)"],
    ["port", "80", 'port must be an integer from 0 to 65535 (got "80")'],
    ["host", "", 'host must be a non-empty string (got "")'],
    ["host", 1, "host must be a non-empty string (got 1)"],
    ["reload", "yes", 'reload must be true or false (got "yes")'],
    ["log_level", "verbose", 'log_level must be one of debug, info, warning, error (got "verbose")'],
    ["auto_open_browser", 1, "auto_open_browser must be true or false (got 1)"],
    ["show_startup_info", null, "show_startup_info must be true or false (got null)"],
    ["mcp_config_file", "  ", 'mcp_config_file must be a non-empty string (got "  ")'],
    ["debug", "true", 'debug must be true or false (got "true")'],
    [
      "tool_record_max_file_size",
      0,
      "tool_record_max_file_size must be a number of megabytes > 0, or -1 (unlimited) (got 0)"
    ],
    [
      "tool_record_retention_days",
      -2,
      "tool_record_retention_days must be a number of days > 0, or -1 (never delete) (got -2)"
    ],
    ["api_key", 42, "api_key must be a non-empty string (got 42)"]
  ] as const)("refuses %s = %j naming the option", (key, value, message) => {
    const e = refusal(() => checkOption(key, value))
    expect(e.option).toBe(key)
    expect(e.message).toBe(message)
    expect(refusal(() => checkOption(key, value, "--somewhere")).message).toBe(`--somewhere: ${message}`)
  })
})

describe("optionFromText", () => {
  it("converts numbers, booleans and JSON", () => {
    expect(optionFromText("port", "8080")).toBe(8080)
    expect(optionFromText("tool_record_max_file_size", "-1")).toBe(-1)
    expect(optionFromText("tool_record_retention_days", "0.5")).toBe(0.5)
    for (const t of ["true", "1", "YES", "on"]) expect(optionFromText("reload", t)).toBe(true)
    for (const t of ["false", "0", "no", "Off"]) expect(optionFromText("debug", t)).toBe(false)
    expect(optionFromText("monitoring", '{"health_check_seconds": 1}')).toEqual({ health_check_seconds: 1 })
    expect(optionFromText("host", "127.0.0.1")).toBe("127.0.0.1")
  })

  it("refuses text that is not a value of the option", () => {
    expect(refusal(() => optionFromText("port", "80a", "MCPSTORE_PORT")).message).toBe(
      'MCPSTORE_PORT: port must be an integer from 0 to 65535 (got "80a")'
    )
    expect(refusal(() => optionFromText("port", "")).option).toBe("port")
    expect(refusal(() => optionFromText("tool_record_max_file_size", "big")).option).toBe("tool_record_max_file_size")
    expect(refusal(() => optionFromText("reload", "maybe")).message).toBe(
      'reload must be true or false (or 1/0, yes/no, on/off) (got "maybe")'
    )
    const json = refusal(() => optionFromText("monitoring", "{health", "--monitoring"))
    expect(json.option).toBe("monitoring")
    expect(json.message).toMatch(/^--monitoring: monitoring must be a JSON object \(.+\)$/)
  })
})

describe("checkOptionValues, mergeOptionValues and resolveOptions", () => {
  it("refuses unknown keys and non-objects", () => {
    const e = refusal(() => checkOptionValues({ prot: 1 }, "file.json"))
    expect(e.option).toBe("prot")
    expect(e.message).toContain('file.json: unknown option "prot"')
    expect(refusal(() => checkOptionValues([])).option).toBe("standalone_config")
  })

  it("merges later layers over earlier ones, monitoring key by key", () => {
    const merged = mergeOptionValues(
      { port: 1, host: "a", monitoring: { health_check_seconds: 5, slow_response_ms: 100 } },
      { port: 2, monitoring: { health_check_seconds: 7 } }
    )
    expect(merged).toEqual({ port: 2, host: "a", monitoring: { health_check_seconds: 7, slow_response_ms: 100 } })
  })

  it("resolves defaults and an absolute services file path", () => {
    const { server, store } = resolveOptions({}, "/srv/app")
    expect(server).toEqual({
      host: "127.0.0.1",
      port: 18200,
      reload: false,
      logLevel: "info",
      logFormat: "text",
      autoOpenBrowser: false,
      showStartupInfo: true,
      apiKey: undefined,
      localServices: true,
      allowedHosts: [],
      allowedOrigins: [],
      allowRemoteLocalServices: false,
      denyByDefault: false,
      toolSearchScopes: [],
      alwaysVisibleTools: [],
      maxEventStreams: 100,
      maxMcpSessions: 1000,
      mcpSessionIdleSeconds: 1800,
      maxBodyBytes: 1048576,
      maxConnections: 1000
    })
    expect(store.limits).toEqual({
      maxMessageBytes: 16 * 1024 * 1024,
      maxServices: 10_000,
      maxServicesPerRequest: 100,
      maxWaiters: 10_000,
      maxHeldCalls: 100,
      maxCallSeconds: 3600,
      toolRecordMaxValueBytes: 64 * 1024,
      maxAsyncCalls: 100,
      maxAsyncResults: 1000,
      asyncResultRetentionSeconds: 86_400,
      asyncResultsMaxBytes: 64 * 1024 * 1024,
      upstreamAllow: [],
      upstreamAllowMetadata: false,
      maxApprovals: 100,
      maxApprovalsPerKey: 10,
      approvalTimeoutSeconds: 300,
      perUserConnections: 16,
      perUserIdleSeconds: 300
    })
    expect(() => resolveOptions({ upstream_allow: ["10.0.0.0/33"] })).toThrow(/upstream_allow/)
    expect(() => resolveOptions({ upstream_allow: ["a b"] })).toThrow(/upstream_allow/)
    expect(store.mcpConfigFile).toBe("/srv/app/mcp.json")
    expect(store.debug).toBe(false)
    expect(store.toolRecordMaxFileSize).toBe(30)
    expect(store.toolRecordRetentionDays).toBe(7)
    expect(store.monitoring).toEqual(resolveMonitoring({}))
    expect(resolveOptions({ mcp_config_file: "/abs/x.json" }, "/srv").store.mcpConfigFile).toBe("/abs/x.json")
  })
})

describe("tracing options", () => {
  it("sends traces to the base URL's /v1/traces, or to the traces URL as given, which wins; tracing is off without either", () => {
    expect(resolveOptions({}).store.tracing).toBeUndefined()
    expect(resolveOptions({ otlp_endpoint: "http://collector:4318/" }).store.tracing?.url).toBe("http://collector:4318/v1/traces")
    expect(resolveOptions({ otlp_traces_endpoint: "https://collector/otlp/traces" }).store.tracing?.url).toBe("https://collector/otlp/traces")
    expect(resolveOptions({ otlp_endpoint: "http://base:4318", otlp_traces_endpoint: "http://traces:4318/custom" }).store.tracing?.url).toBe("http://traces:4318/custom")
    expect(refusal(() => resolveOptions({ otlp_traces_endpoint: "collector:4318" })).message).toMatch(/otlp_traces_endpoint/)
    expect(refusal(() => resolveOptions({ otlp_traces_endpoint: "ftp://collector/traces" })).message).toMatch(/otlp_traces_endpoint/)
  })
})

describe("safety options", () => {
  it("reads host and origin lists from arrays and comma lists", () => {
    expect(checkOption("allowed_hosts", ["store.lan", " box:8080 "])).toEqual(["store.lan", "box:8080"])
    expect(optionFromText("allowed_hosts", "a.example, b.example:1,,")).toEqual(["a.example", "b.example:1"])
    expect(optionFromText("allowed_origins", "https://app.example.com,http://localhost:5173,*")).toEqual([
      "https://app.example.com",
      "http://localhost:5173",
      "*"
    ])
  })

  it("refuses hosts with paths or spaces and origins without a scheme", () => {
    expect(() => checkOption("allowed_hosts", ["http://x/"])).toThrow(/allowed_hosts must hold host names/)
    expect(() => checkOption("allowed_hosts", "a b")).toThrow(/allowed_hosts/)
    expect(() => checkOption("allowed_hosts", 5)).toThrow(/must be a list of strings/)
    expect(() => checkOption("allowed_origins", ["app.example.com"])).toThrow(/allowed_origins must hold origins/)
    expect(() => checkOption("allowed_origins", ["https://app.example.com/path"])).toThrow(/allowed_origins/)
  })

  it("reads the built-in authorization server's options; --public-url is a base URL without query or credentials", () => {
    const { server } = resolveOptions({ auth_server: true, auth_dev_loopback_clients: true, auth_dynamic_registration: false, public_url: "https://store.example.com/" })
    expect(server).toMatchObject({ authServer: true, authDevLoopbackClients: true, authDynamicRegistration: false, publicUrl: "https://store.example.com" })
    expect(resolveOptions({}).server.authServer).toBeUndefined()
    expect(optionFromText("auth_server", "yes")).toBe(true)
    expect(refusal(() => checkOption("public_url", "ftp://store.example.com")).message).toMatch(/public_url/)
    expect(refusal(() => checkOption("public_url", "https://u:p@store.example.com")).message).toMatch(/without query, fragment or credentials/)
    expect(refusal(() => checkOption("public_url", "https://store.example.com/?a=1")).message).toMatch(/public_url/)
  })

  it("checks every cap as a positive integer (the idle time may be fractional)", () => {
    for (const key of ["max_event_streams", "max_mcp_sessions", "max_body_bytes", "max_connections", "max_message_bytes", "max_services", "max_services_per_request", "max_waiters", "max_held_calls", "max_call_seconds"] as const) {
      expect(optionFromText(key, "7")).toBe(7)
      expect(() => optionFromText(key, "0")).toThrow(new RegExp(`${key} must be an integer >= 1`))
      expect(() => checkOption(key, 1.5)).toThrow(/integer/)
    }
    expect(optionFromText("mcp_session_idle_seconds", "0.5")).toBe(0.5)
    expect(() => optionFromText("mcp_session_idle_seconds", "-1")).toThrow(/mcp_session_idle_seconds/)
    // A call's time-out is a Node timer: longer than 2^31-1 ms would fire at once.
    expect(() => checkOption("max_call_seconds", 2_147_484)).toThrow(/max_call_seconds must be an integer >= 1 and <= 2147483/)
  })

  it("resolves the caps into the server and store options", () => {
    const { server, store } = resolveOptions({ max_event_streams: 3, max_services: 9, allow_remote_local_services: true, allowed_hosts: ["h"] })
    expect(server.maxEventStreams).toBe(3)
    expect(server.allowRemoteLocalServices).toBe(true)
    expect(server.allowedHosts).toEqual(["h"])
    expect(store.limits.maxServices).toBe(9)
    expect(store.limits.maxWaiters).toBe(10_000)
  })
})
