# Stand-in for a cloud VPC module: the same variables, no provider. terraform_data records the
# network it would create so a plan shows real changes and outputs have ids.

variable "region" {
  type = string
}

variable "cidr_block" {
  type = string
}

variable "enable_dns_hostnames" {
  type = bool
}

variable "subnets" {
  type = list(object({
    cidr_block        = string
    availability_zone = string
    public            = optional(bool, false)
  }))
}

variable "nat_gateway" {
  type = object({
    enabled            = bool
    single_nat_gateway = bool
  })
}

variable "flow_logs" {
  type = bool
}

variable "tags" {
  type = map(string)
}

resource "terraform_data" "vpc" {
  input = {
    region     = var.region
    cidr_block = var.cidr_block
    tags       = var.tags
  }
}

resource "terraform_data" "subnet" {
  for_each = { for s in var.subnets : s.cidr_block => s }
  input    = merge(each.value, { vpc = terraform_data.vpc.id })
}

output "vpc_id" {
  value = terraform_data.vpc.id
}

output "public_subnet_ids" {
  value = [for k, s in terraform_data.subnet : s.id if s.input.public]
}

output "private_subnet_ids" {
  value = [for k, s in terraform_data.subnet : s.id if !s.input.public]
}

output "received" {
  value = {
    region               = var.region
    cidr_block           = var.cidr_block
    enable_dns_hostnames = var.enable_dns_hostnames
    subnets              = var.subnets
    nat_gateway          = var.nat_gateway
    flow_logs            = var.flow_logs
    tags                 = var.tags
  }
}
