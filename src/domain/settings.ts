/**
 * The store's monitoring settings and lifecycle constants (docs/lifecycle.md, Settings) with their
 * defaults. The machines read these numbers; src/config validates what a user gives.
 */

/** Every monitoring key and lifecycle constant, defaults filled in. */
export interface MonitoringSettings {
  readonly health_check_seconds: number
  readonly tools_update_hours: number
  readonly reconnection_seconds: number
  readonly cleanup_hours: number
  readonly enable_tools_update: boolean
  readonly enable_reconnection: boolean
  readonly update_tools_on_reconnection: boolean
  readonly warning_check_seconds: number
  readonly ping_timeout_seconds: number
  readonly slow_response_ms: number
  readonly initialization_timeout_seconds: number
  readonly reconnecting_failure_threshold: number
  readonly max_reconnect_attempts: number
  readonly unreachable_retry_seconds: number
  readonly disconnection_timeout_seconds: number
}

/** The defaults (docs/lifecycle.md); `warning_check_seconds` follows `health_check_seconds` unless given. */
export const defaultMonitoring = (given: Partial<MonitoringSettings> = {}): MonitoringSettings => {
  const health = given.health_check_seconds ?? 30
  return {
    health_check_seconds: health,
    tools_update_hours: 2,
    reconnection_seconds: 60,
    cleanup_hours: 24,
    enable_tools_update: true,
    enable_reconnection: true,
    update_tools_on_reconnection: true,
    warning_check_seconds: Math.min(10, health),
    ping_timeout_seconds: 5,
    slow_response_ms: 3000,
    initialization_timeout_seconds: 60,
    reconnecting_failure_threshold: 2,
    max_reconnect_attempts: 10,
    unreachable_retry_seconds: 300,
    disconnection_timeout_seconds: 10,
    ...given
  }
}
