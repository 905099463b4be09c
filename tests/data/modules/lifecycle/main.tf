# The module of the flux tier's Tofu lifecycle tests: built-ins only (no provider to download), a
# resource whose id OpenTofu computes, outputs that echo the typed inputs, and a validation rule a
# test can break on purpose.

variable "size" {
  type = number
  validation {
    condition     = var.size >= 1 && var.size <= 10
    error_message = "size must be between 1 and 10."
  }
}

variable "zones" {
  type    = list(string)
  default = []
}

variable "settings" {
  type = object({
    enabled = bool
    label   = optional(string, "none")
  })
  default = { enabled = false }
}

variable "from_config" {
  type    = string
  default = ""
}

variable "from_secret" {
  type      = string
  default   = ""
  sensitive = true
}

resource "terraform_data" "instance" {
  input = {
    size     = var.size
    zones    = var.zones
    settings = var.settings
  }

  # A destroy that takes a few seconds, so a test can see the Application while it runs.
  provisioner "local-exec" {
    when    = destroy
    command = "sleep 4"
  }
}

output "instance_id" {
  value = terraform_data.instance.id
}

output "received" {
  value = {
    size     = var.size
    zones    = var.zones
    settings = var.settings
  }
}

output "from_config" {
  value = var.from_config
}

output "from_secret_length" {
  value = length(nonsensitive(var.from_secret))
}
