# The module of the flux tier's Event relay test: two string inputs the module does NOT mark sensitive, each with
# a validation rule that a value starting with "leak-" breaks. OpenTofu then prints the value in clear in its
# diagnostic ("var.token is ..."), which tofu-controller puts into its Event; the relay must keep it out of the
# Event it writes about the Application. "token" comes from the Application's spec (the definition marks it
# x-cozystack-sensitive), "from_secret" from a Secret through varsFrom.

variable "token" {
  type    = string
  default = ""
  validation {
    condition     = !startswith(var.token, "leak-")
    error_message = "token must not start with leak-."
  }
}

variable "from_secret" {
  type    = string
  default = ""
  validation {
    condition     = !startswith(var.from_secret, "leak-")
    error_message = "from_secret must not start with leak-."
  }
}

resource "terraform_data" "instance" {
  input = length(var.token) + length(var.from_secret)
}
